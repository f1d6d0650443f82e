package index

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/dao"
)

// Retention is how long a slice's ZSET outlives its minute, so late and re-run triggers still
// find it; after that Redis drops it by itself.
const Retention = time.Hour

// BatchSize is how many members one pipeline round trip adds or removes.
const BatchSize = 1000

// Entry is one occurrence in one slice.
type Entry struct {
	Slice       Slice
	TimerID     int64
	ScheduledMS int64
}

// Member is the entry's ZSET member, the occurrence's idempotency key.
func (e Entry) Member() string { return Member(e.TimerID, e.ScheduledMS) }

// Index reads and writes the slice ZSETs.
type Index struct {
	rdb  redis.UniversalClient
	keys Keys
}

// New returns the index over rdb with keys.
func New(rdb redis.UniversalClient, keys Keys) *Index { return &Index{rdb: rdb, keys: keys} }

// Keys is the index's key builder.
func (x *Index) Keys() Keys { return x.keys }

// Client is the underlying Redis client.
func (x *Index) Client() redis.UniversalClient { return x.rdb }

// Add stamps entries (ZADD, idempotent) and sets each touched slice to expire Retention after
// its end, in pipelines of BatchSize members. now is the caller's clock, used for the TTL.
// A failed batch fails the call, but batches already sent stay: stamping again is harmless.
func (x *Index) Add(ctx context.Context, entries []Entry, now time.Time) error {
	return x.Update(ctx, nil, entries, now)
}

// Remove deletes entries (ZREM), in pipelines of BatchSize members.
func (x *Index) Remove(ctx context.Context, entries []Entry, now time.Time) error {
	return x.Update(ctx, entries, nil, now)
}

// Update removes then adds: an occurrence in both lists stays stamped.
func (x *Index) Update(ctx context.Context, remove, add []Entry, now time.Time) error {
	for len(remove) > 0 {
		n := min(len(remove), BatchSize)
		if err := x.send(ctx, remove[:n], false, now); err != nil {
			return err
		}
		remove = remove[n:]
	}
	for len(add) > 0 {
		n := min(len(add), BatchSize)
		if err := x.send(ctx, add[:n], true, now); err != nil {
			return err
		}
		add = add[n:]
	}
	return nil
}

// send writes one batch: per slice key in it, one ZADD (then PEXPIRE) or ZREM, and an INCR
// of the slice's change counter (with the same expiry) so its triggers notice.
func (x *Index) send(ctx context.Context, batch []Entry, add bool, now time.Time) error {
	type group struct {
		slice   Slice
		members []any
		zs      []redis.Z
	}
	var order []string
	groups := map[string]*group{}
	for _, e := range batch {
		key := x.keys.Slice(e.Slice)
		g := groups[key]
		if g == nil {
			g = &group{slice: e.Slice}
			groups[key] = g
			order = append(order, key)
		}
		if add {
			g.zs = append(g.zs, redis.Z{Score: float64(e.ScheduledMS), Member: e.Member()})
		} else {
			g.members = append(g.members, e.Member())
		}
	}
	pipe := x.rdb.Pipeline()
	for _, key := range order {
		g := groups[key]
		ttl := max(g.slice.End().Add(Retention).Sub(now), SliceLen)
		if add {
			pipe.ZAdd(ctx, key, g.zs...)
			pipe.PExpire(ctx, key, ttl)
		} else {
			pipe.ZRem(ctx, key, g.members...)
		}
		seq := x.keys.SliceSeq(g.slice)
		pipe.Incr(ctx, seq)
		pipe.PExpire(ctx, seq, ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		verb := "stamp"
		if !add {
			verb = "unstamp"
		}
		return fmt.Errorf("index: %s %d occurrences in %d slices: %w", verb, len(batch), len(order), err)
	}
	return nil
}

// Seq returns the slice's change counter: it moves whenever occurrences are stamped into or
// removed from the slice (0 when never changed or expired).
func (x *Index) Seq(ctx context.Context, s Slice) (int64, error) {
	n, err := x.rdb.Get(ctx, x.keys.SliceSeq(s)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("index: read slice %s change counter: %w", s, err)
	}
	return n, nil
}

// Occurrence is a member read back from a slice.
type Occurrence struct {
	TimerID     int64
	ScheduledMS int64
}

// Key is the occurrence's idempotency key.
func (o Occurrence) Key() string { return dao.Key(o.TimerID, o.ScheduledMS) }

// Due is the scheduled time.
func (o Occurrence) Due() time.Time { return time.UnixMilli(o.ScheduledMS).UTC() }

// Read returns all occurrences of a slice ordered by scheduled time, in one round trip.
// Members that do not parse (written by something else) are skipped and counted in bad.
func (x *Index) Read(ctx context.Context, s Slice) (occ []Occurrence, bad int, err error) {
	zs, err := x.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: x.keys.Slice(s), Start: "-inf", Stop: "+inf", ByScore: true,
	}).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("index: read slice %s: %w", s, err)
	}
	occ = make([]Occurrence, 0, len(zs))
	for _, m := range zs {
		id, ms, err := dao.ParseKey(m)
		if err != nil {
			bad++
			continue
		}
		occ = append(occ, Occurrence{TimerID: id, ScheduledMS: ms})
	}
	return occ, bad, nil
}
