package index_test

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
)

// memoryOccurrences is how many occurrences BenchmarkRedisMemoryPerMember stamps.
const memoryOccurrences = 1_000_000

// BenchmarkRedisMemoryPerMember measures the Redis memory one stamped occurrence costs: it
// stamps 1,000,000 occurrences into per-minute slices of 8 buckets on the real Redis
// (TOCK_TEST_REDIS_ADDR; skipped when unset), under a fresh prefix deleted afterwards, and
// reports
//
//   - used-B/member: the INFO memory used_memory delta over the members (everything: ZSETs,
//     the slices' change counters, key and expiry dictionaries; noisy when other clients
//     write to the same server meanwhile);
//   - zset-B/member: the sum of MEMORY USAGE (SAMPLES 0, exact) over the slices' ZSETs;
//   - sample-B/member: MEMORY USAGE of one slice over its ZCARD, logged with its encoding.
//
// "dense" is 10,000 timers a minute (1,250 members a slice: above the default
// zset-max-listpack-entries 128, so a skiplist); "sparse" is 1,000 a minute (125 a slice, a
// listpack).
func BenchmarkRedisMemoryPerMember(b *testing.B) {
	for _, c := range []struct {
		name      string
		perMinute int
	}{{"dense", 10_000}, {"sparse", 1_000}} {
		b.Run(c.name, func(b *testing.B) {
			r := indextest.RealRedis(b)
			ctx := context.Background()
			keys := index.NewKeys(r.Prefix, 8)
			x := index.New(r.Client, keys)
			for range b.N {
				m := measureMemory(ctx, b, r, keys, x, c.perMinute)
				b.ReportMetric(m.used, "used-B/member")
				b.ReportMetric(m.zsets, "zset-B/member")
				b.ReportMetric(m.sample, "sample-B/member")
			}
		})
	}
}

type memoryReport struct{ used, zsets, sample float64 }

func measureMemory(ctx context.Context, b *testing.B, r *indextest.Redis, keys index.Keys, x *index.Index, perMinute int) memoryReport {
	b.Helper()
	before := usedMemory(ctx, b, r.Client)
	now := time.Now().UTC()
	start := index.SliceStart(now).Add(time.Minute)
	const chunk = 8 * index.BatchSize
	es := make([]index.Entry, 0, chunk)
	memberBytes := 0
	for i := 0; i < memoryOccurrences; i += chunk {
		es = es[:0]
		for j := i; j < min(i+chunk, memoryOccurrences); j++ {
			// Timer 1,000,000 + j mod perMinute, once a minute at its own millisecond.
			id := int64(1_000_000 + j%perMinute)
			at := start.Add(time.Duration(j/perMinute)*time.Minute + time.Duration(id*7919%60_000)*time.Millisecond)
			e := index.Entry{Slice: index.SliceAt(at, keys.Bucket(id)), TimerID: id, ScheduledMS: at.UnixMilli()}
			memberBytes += len(e.Member())
			es = append(es, e)
		}
		if err := x.Add(ctx, es, now); err != nil {
			b.Fatal(err)
		}
	}
	after := usedMemory(ctx, b, r.Client)

	// Sum the exact size of every slice ZSET (not the ":seq" counters).
	var zsetBytes, members int64
	var sample string
	var cursor uint64
	for {
		ks, next, err := r.Client.Scan(ctx, cursor, r.Prefix+"{*}", 1000).Result()
		if err != nil {
			b.Fatal(err)
		}
		pipe := r.Client.Pipeline()
		usage := make([]*redis.IntCmd, len(ks))
		card := make([]*redis.IntCmd, len(ks))
		for i, k := range ks {
			usage[i] = pipe.MemoryUsage(ctx, k, 0)
			card[i] = pipe.ZCard(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		for i := range ks {
			zsetBytes += usage[i].Val()
			members += card[i].Val()
		}
		if sample == "" && len(ks) > 0 {
			sample = ks[0]
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	if members != memoryOccurrences {
		b.Fatalf("%d members in the slices, want %d", members, memoryOccurrences)
	}
	enc := r.Client.ObjectEncoding(ctx, sample).Val()
	sampleBytes := r.Client.MemoryUsage(ctx, sample, 0).Val()
	sampleCard := r.Client.ZCard(ctx, sample).Val()
	listpack, _ := r.Client.ConfigGet(ctx, "zset-max-listpack-entries").Result()
	m := memoryReport{
		used:   float64(after-before) / memoryOccurrences,
		zsets:  float64(zsetBytes) / memoryOccurrences,
		sample: float64(sampleBytes) / float64(sampleCard),
	}
	b.Logf("%d occurrences, %d a minute in 8 buckets: used_memory +%d B (%.1f B/member); ZSETs %d B (%.1f B/member); "+
		"sample %s: %s, %d members, %d B (%.1f B/member); member %.1f B on average; zset-max-listpack-entries %v",
		memoryOccurrences, perMinute, after-before, m.used, zsetBytes, m.zsets,
		sample, enc, sampleCard, sampleBytes, m.sample, float64(memberBytes)/memoryOccurrences, listpack["zset-max-listpack-entries"])

	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := indextest.DeletePrefix(dctx, r.Client, r.Prefix); err != nil {
		b.Fatal(err)
	}
	return m
}

// usedMemory is INFO memory's used_memory.
func usedMemory(ctx context.Context, b *testing.B, rdb redis.UniversalClient) int64 {
	b.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
