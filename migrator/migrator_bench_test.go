package migrator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
	"github.com/tockd/tock/migrator"
	"github.com/tockd/tock/schedule"
)

// Benchmarks of the migrator's passes. The real Redis (TOCK_TEST_REDIS_ADDR) and MySQL
// (TOCK_TEST_MYSQL_DSN) variants are skipped when their variable is unset; miniredis and
// SQLite always run. Keys go under a fresh prefix deleted after each run.
//
//	TOCK_TEST_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test' TOCK_TEST_REDIS_ADDR=127.0.0.1:6379 \
//	  go test -run XXX -bench . -benchmem ./migrator/

// memStore serves enabled timers from memory (sorted by id), so a benchmark measures the
// stamping rather than the database.
type memStore struct{ timers []dao.Timer }

func (s *memStore) ListEnabledTimers(_ context.Context, afterID int64, limit int) ([]dao.Timer, error) {
	i := sort.Search(len(s.timers), func(i int) bool { return s.timers[i].ID > afterID })
	return s.timers[i:min(i+limit, len(s.timers))], nil
}

// everyMinute returns n timers firing once a minute, each at its own millisecond of the
// minute, last changed long before base.
func everyMinute(n int, base time.Time) []dao.Timer {
	ts := make([]dao.Timer, n)
	for i := range ts {
		id := int64(1_000_000 + i)
		ts[i] = dao.Timer{
			ID: id, App: "bench", Name: fmt.Sprint("t", id), Status: dao.StatusEnabled, Version: 1,
			Schedule:  dao.JSONSpec(schedule.Spec{Every: "1m"}),
			AnchorMS:  base.Add(-24*time.Hour).UnixMilli() + id*7919%60_000,
			CreatedMS: base.Add(-24 * time.Hour).UnixMilli(), UpdatedMS: base.Add(-24 * time.Hour).UnixMilli(),
		}
	}
	return ts
}

// countMembers sums ZCARD over the slice ZSETs under prefix.
func countMembers(ctx context.Context, b *testing.B, rdb redis.UniversalClient, prefix string) int64 {
	b.Helper()
	var total int64
	var cursor uint64
	for {
		ks, next, err := rdb.Scan(ctx, cursor, prefix+"{*}", 1000).Result()
		if err != nil {
			b.Fatal(err)
		}
		pipe := rdb.Pipeline()
		cards := make([]*redis.IntCmd, len(ks))
		for i, k := range ks {
			cards[i] = pipe.ZCard(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && len(ks) > 0 {
			b.Fatal(err)
		}
		for _, c := range cards {
			total += c.Val()
		}
		if next == 0 {
			return total
		}
		cursor = next
	}
}

func newBenchMigrator(b *testing.B, cfg migrator.Config, store migrator.Store, rdb redis.UniversalClient, prefix string, now time.Time) (*migrator.Migrator, *index.Index) {
	b.Helper()
	idx := index.New(rdb, index.NewKeys(prefix, 8))
	cfg.Clock, cfg.Logger = clockwork.NewFakeClockAt(now), slog.New(slog.DiscardHandler)
	m, err := migrator.New(cfg, store, idx)
	if err != nil {
		b.Fatal(err)
	}
	return m, idx
}

// BenchmarkStampMillion is the target: 1,000,000 occurrences stamped through the
// migrator in at most 10 s. 10,000 timers firing every minute and a 100-minute horizon (1 min
// step + 99 min window) make one full pass (a first start, or Redis emptied) stamp exactly
// 1,000,000 occurrences into 800 slices (8 buckets) of the real Redis. The miniredis variant
// stamps 10,000 (100 timers) to stay quick: miniredis is far slower than Redis. One op is one
// pass.
func BenchmarkStampMillion(b *testing.B) {
	run := func(b *testing.B, r *indextest.Redis, timers int) {
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Minute)
		store := &memStore{timers: everyMinute(timers, now)}
		cfg := migrator.Config{Step: time.Minute, Window: 99 * time.Minute, PageSize: 1000}
		want := int64(timers) * 100
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			prefix := fmt.Sprintf("%sm%d:", r.Prefix, i)
			m, _ := newBenchMigrator(b, cfg, store, r.Client, prefix, now)
			b.StartTimer()
			if err := m.RunOnce(ctx, now); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if n := countMembers(ctx, b, r.Client, prefix); n != want {
				b.Fatalf("stamped %d occurrences, want %d", n, want)
			}
			if err := indextest.DeletePrefix(ctx, r.Client, prefix); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.StopTimer()
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/pass")
		b.ReportMetric(float64(want)*float64(b.N)/b.Elapsed().Seconds(), "occurrences/s")
	}
	b.Run("redis", func(b *testing.B) { run(b, indextest.RealRedis(b), 10_000) })
	b.Run("miniredis-10k", func(b *testing.B) { run(b, indextest.Miniredis(b, nil), 100) })
}

// stepTimers is the number of stored timers BenchmarkMinuteStep pages through.
const stepTimers = 10_000

// BenchmarkMinuteStep measures one routine step with the defaults (1 min step, 2 h window):
// the pass at a minute boundary that reads every enabled timer from the store (10,000 timers
// firing every minute, PageSize 500) and stamps the minute entering the window (10,000
// occurrences). One op is one step; ops run at consecutive minutes.
func BenchmarkMinuteStep(b *testing.B) {
	sqlite := daotest.SQLite(b)
	seedTimers(b, sqlite, stepTimers)
	var mysql *dao.Store
	if os.Getenv(daotest.EnvMySQLDSN) != "" {
		mysql = daotest.MySQL(b)
		seedTimers(b, mysql, stepTimers)
	}
	run := func(b *testing.B, store migrator.Store, r *indextest.Redis) {
		ctx := context.Background()
		base := time.Now().UTC().Truncate(time.Minute)
		m, idx := newBenchMigrator(b, migrator.Config{}, store, r.Client, r.Prefix, base)
		// Steady state: the step before base has stamped up to its horizon.
		prev := base.Add(-migrator.DefaultStep)
		horizon := m.Horizon(prev)
		if err := r.Client.Set(ctx, idx.Keys().MigrateMarker(prev), horizon.UnixMilli(), horizon.Sub(base)).Err(); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := m.RunOnce(ctx, base.Add(time.Duration(i)*migrator.DefaultStep)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if n := countMembers(ctx, b, r.Client, r.Prefix); n != int64(b.N)*stepTimers {
			b.Fatalf("%d steps stamped %d occurrences, want %d", b.N, n, b.N*stepTimers)
		}
		b.ReportMetric(float64(b.N)*stepTimers/b.Elapsed().Seconds(), "timers/s")
	}
	b.Run("sqlite/miniredis", func(b *testing.B) { run(b, sqlite, indextest.Miniredis(b, nil)) })
	b.Run("sqlite/redis", func(b *testing.B) { run(b, sqlite, indextest.RealRedis(b)) })
	b.Run("mysql/redis", func(b *testing.B) {
		if mysql == nil {
			b.Skipf("%s not set", daotest.EnvMySQLDSN)
		}
		run(b, mysql, indextest.RealRedis(b))
	})
}

var seedSeq atomic.Int64

// seedTimers inserts n enabled timers firing every minute (each at its own millisecond of
// the minute) in multi-row INSERTs, far quicker than n CreateTimer calls. It writes the
// columns CreateTimer writes.
func seedTimers(b *testing.B, s *dao.Store, n int) {
	b.Helper()
	ctx := context.Background()
	const rows = 500
	old := time.Now().Add(-24 * time.Hour).UnixMilli()
	cb := dao.Callback{URL: "http://127.0.0.1:9/hook", Method: "POST", TimeoutMS: 5000}
	retry := dao.RetryPolicy{MaxAttempts: 3, BackoffMS: 1000, MaxBackoffMS: 60000}
	for done := 0; done < n; done += rows {
		k := min(rows, n-done)
		var args []any
		for i := range k {
			name := fmt.Sprint("seed-", seedSeq.Add(1))
			args = append(args, "bench", name, name, dao.StatusEnabled, dao.JSONSpec(schedule.Spec{Every: "1m"}),
				old+int64(done+i)*7919%60_000, cb, retry, dao.MisfireOrDefault(""), nil, "", 1, old, old)
		}
		q := `INSERT INTO timer (app, name, live_name, status, schedule, anchor_ms, callback, retry, misfire,
			request_id, request_hash, version, created_ms, updated_ms) VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", k), ", ")
		if _, err := s.DB().ExecContext(ctx, q, args...); err != nil {
			b.Fatalf("seed timers: %v", err)
		}
	}
}
