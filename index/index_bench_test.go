package index_test

import (
	"context"
	"testing"
	"time"

	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
)

// Benchmarks of the index's hot paths, on miniredis always and on the real Redis named by
// TOCK_TEST_REDIS_ADDR (skipped when unset). Each run writes under a fresh key prefix, deleted
// when the run ends.
//
//	TOCK_TEST_REDIS_ADDR=127.0.0.1:6379 go test -run XXX -bench . -benchmem ./index/

// eachRedis runs fn as sub-benchmarks "miniredis" and "redis".
func eachRedis(b *testing.B, fn func(b *testing.B, r *indextest.Redis)) {
	b.Run("miniredis", func(b *testing.B) { fn(b, indextest.Miniredis(b, nil)) })
	b.Run("redis", func(b *testing.B) { fn(b, indextest.RealRedis(b)) })
}

// benchTimers is how many timers the synthetic occurrences belong to: each fires once a
// minute at its own second, so a minute holds benchTimers occurrences spread over the
// buckets, as the migrator stamps them.
const benchTimers = 10_000

// benchEntry is the j-th synthetic occurrence from start: timer 1,000,000 + j mod benchTimers,
// in minute j / benchTimers, at a millisecond of the minute set by the timer.
func benchEntry(keys index.Keys, start time.Time, j int) index.Entry {
	id := int64(1_000_000 + j%benchTimers)
	at := start.Add(time.Duration(j/benchTimers)*time.Minute + time.Duration(id*7919%60_000)*time.Millisecond)
	return index.Entry{Slice: index.SliceAt(at, keys.Bucket(id)), TimerID: id, ScheduledMS: at.UnixMilli()}
}

// BenchmarkStamp measures Index.Add (pipelined ZADD + PEXPIRE + change counters) per
// occurrence, in calls of 8,000 entries as the migrator makes them.
func BenchmarkStamp(b *testing.B) {
	eachRedis(b, func(b *testing.B, r *indextest.Redis) {
		ctx := context.Background()
		keys := index.NewKeys(r.Prefix, 8)
		x := index.New(r.Client, keys)
		now := time.Now().UTC()
		start := index.SliceStart(now).Add(time.Minute)
		const chunk = 8 * index.BatchSize
		es := make([]index.Entry, 0, chunk)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += chunk {
			b.StopTimer()
			es = es[:0]
			for j := i; j < min(i+chunk, b.N); j++ {
				es = append(es, benchEntry(keys, start, j))
			}
			b.StartTimer()
			if err := x.Add(ctx, es, now); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "occurrences/s")
	})
}

// BenchmarkReadSlice measures Index.Read of one slice of 5,000 occurrences (one ZRANGE round
// trip and the parsing of its members) per call.
func BenchmarkReadSlice(b *testing.B) {
	const members = 5_000
	eachRedis(b, func(b *testing.B, r *indextest.Redis) {
		ctx := context.Background()
		keys := index.NewKeys(r.Prefix, 1)
		x := index.New(r.Client, keys)
		now := time.Now().UTC()
		s := index.Slice{Start: index.SliceStart(now).Add(time.Minute)}
		es := make([]index.Entry, members)
		for j := range es {
			// 5,000 timers of one bucket, each at its own millisecond of the minute.
			id := int64(1_000_000 + j)
			es[j] = index.Entry{Slice: s, TimerID: id, ScheduledMS: s.Start.UnixMilli() + id*7919%60_000}
		}
		if err := x.Add(ctx, es, now); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			occ, bad, err := x.Read(ctx, s)
			if err != nil || bad != 0 || len(occ) != members {
				b.Fatalf("Read: %d occurrences, %d bad, err %v", len(occ), bad, err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)*members/b.Elapsed().Seconds(), "occurrences/s")
	})
}
