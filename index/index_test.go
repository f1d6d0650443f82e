package index_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
)

func TestIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	indextest.Each(t, func(t *testing.T, r *indextest.Redis) {
		keys := index.NewKeys(r.Prefix, 4)
		x := index.New(r.Client, keys)
		now := time.Now().UTC()
		s := index.SliceAt(now, 1)
		base := s.Start.UnixMilli()

		var entries []index.Entry
		// More than one batch, in reverse order, plus one entry of the next slice.
		for i := 2*index.BatchSize + 10; i >= 1; i-- {
			entries = append(entries, index.Entry{Slice: s, TimerID: int64(i), ScheduledMS: base + int64(i%60000)})
		}
		next := index.Slice{Start: s.End(), Bucket: 1}
		entries = append(entries, index.Entry{Slice: next, TimerID: 7, ScheduledMS: next.Start.UnixMilli()})

		t.Run("AddIsIdempotentAndSetsExpiry", func(t *testing.T) {
			for range 2 {
				if err := x.Add(ctx, entries, now); err != nil {
					t.Fatal(err)
				}
			}
			if n := r.Client.ZCard(ctx, keys.Slice(s)).Val(); n != int64(len(entries)-1) {
				t.Fatalf("slice has %d members, want %d", n, len(entries)-1)
			}
			ttl := r.Client.PTTL(ctx, keys.Slice(s)).Val()
			want := s.End().Add(index.Retention).Sub(now)
			if ttl <= 0 || ttl > want || ttl < want-5*time.Second {
				t.Fatalf("slice PTTL = %s, want about %s (slice end + retention)", ttl, want)
			}
		})
		t.Run("ChangesMoveTheSliceCounter", func(t *testing.T) {
			seq, err := x.Seq(ctx, s)
			if err != nil || seq != 6 {
				t.Fatalf("Seq after two Adds of 3 batches = %d, %v; want 6", seq, err)
			}
			if ttl := r.Client.PTTL(ctx, keys.SliceSeq(s)).Val(); ttl <= 0 {
				t.Fatalf("change counter has no expiry (PTTL %s)", ttl)
			}
			empty := index.Slice{Start: s.Start.Add(-time.Hour), Bucket: 0}
			if seq, err := x.Seq(ctx, empty); err != nil || seq != 0 {
				t.Fatalf("Seq of an untouched slice = %d, %v; want 0", seq, err)
			}
		})
		t.Run("ReadOrdersByScheduledTime", func(t *testing.T) {
			occ, bad, err := x.Read(ctx, s)
			if err != nil || bad != 0 {
				t.Fatalf("Read: bad=%d err=%v", bad, err)
			}
			if len(occ) != len(entries)-1 {
				t.Fatalf("Read returned %d, want %d", len(occ), len(entries)-1)
			}
			for i := 1; i < len(occ); i++ {
				if occ[i].ScheduledMS < occ[i-1].ScheduledMS {
					t.Fatalf("not ordered at %d: %d after %d", i, occ[i].ScheduledMS, occ[i-1].ScheduledMS)
				}
			}
			if occ[0].Key() != index.Member(occ[0].TimerID, occ[0].ScheduledMS) {
				t.Fatal("Key differs from Member")
			}
		})
		t.Run("UpdateRemovesThenAdds", func(t *testing.T) {
			keep := index.Entry{Slice: s, TimerID: 1, ScheduledMS: base + 1}
			gone := index.Entry{Slice: s, TimerID: 2, ScheduledMS: base + 2}
			added := index.Entry{Slice: s, TimerID: 99999, ScheduledMS: base + 5}
			if err := x.Update(ctx, []index.Entry{keep, gone}, []index.Entry{keep, added}, now); err != nil {
				t.Fatal(err)
			}
			for e, want := range map[index.Entry]bool{keep: true, gone: false, added: true} {
				_, err := r.Client.ZScore(ctx, keys.Slice(s), e.Member()).Result()
				if got := err == nil; got != want {
					t.Fatalf("member %s present=%v, want %v", e.Member(), got, want)
				}
			}
		})
		t.Run("ReadSkipsForeignMembers", func(t *testing.T) {
			r.Client.ZAdd(ctx, keys.Slice(next), redisZ(1, "garbage"))
			occ, bad, err := x.Read(ctx, next)
			if err != nil || bad != 1 || len(occ) != 1 {
				t.Fatalf("Read: occ=%v bad=%d err=%v", occ, bad, err)
			}
		})
	})
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }
