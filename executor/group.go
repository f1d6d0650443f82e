package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tockd/tock/dao"
)

// Group writes. Occurrences firing at once each load their timer, claim their execution
// and record their result: several store round trips apiece, which bound the fire rate on
// MySQL long before the CPU does. The grouped store coalesces those calls: a caller's
// request joins whatever requests are waiting while the previous group is being written,
// and the next group goes out in one statement (group commit). An idle engine sends each
// request alone at once, so grouping adds no latency; a busy one sends fewer, larger
// statements. The per-row semantics are dao's group methods'.

// GroupStore is what a store offers to write many occurrences at once (*dao.Store).
type GroupStore interface {
	GetTimers(ctx context.Context, ids []int64) (map[int64]dao.Timer, error)
	ClaimExecutions(ctx context.Context, ps []dao.ClaimParams) ([]dao.ClaimResult, error)
	RecordAttempts(ctx context.Context, ps []dao.RecordAttemptParams) ([]error, error)
	CompleteOneShots(ctx context.Context, ts []dao.OneShot, nowMS int64) error
}

// groupWriters is the number of groups of one kind in flight at once: while one is
// written the next gathers, and a slow statement does not hold up the others.
const groupWriters = 4

// groupTimeout bounds one group statement; callers whose context ends earlier stop waiting.
const groupTimeout = 10 * time.Second

// coalescer runs fn over groups of requests of one kind.
type coalescer[Q, R any] struct {
	reqs chan pending[Q, R]
	max  int
	fn   func(ctx context.Context, qs []Q) ([]R, error)
	quit chan struct{}
	wg   sync.WaitGroup
}

type pending[Q, R any] struct {
	q   Q
	out chan outcome[R]
}

type outcome[R any] struct {
	r   R
	err error
}

func newCoalescer[Q, R any](max int, fn func(ctx context.Context, qs []Q) ([]R, error)) *coalescer[Q, R] {
	c := &coalescer[Q, R]{reqs: make(chan pending[Q, R]), max: max, fn: fn, quit: make(chan struct{})}
	c.wg.Add(groupWriters)
	for range groupWriters {
		go c.loop()
	}
	return c
}

// do sends q with the next group and waits for its result.
func (c *coalescer[Q, R]) do(ctx context.Context, q Q) (R, error) {
	var zero R
	p := pending[Q, R]{q: q, out: make(chan outcome[R], 1)}
	select {
	case c.reqs <- p:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-c.quit:
		return zero, ErrStopped
	}
	select {
	case o := <-p.out:
		return o.r, o.err
	case <-ctx.Done():
		// The group may still write it: like a write whose answer was lost.
		return zero, ctx.Err()
	}
}

func (c *coalescer[Q, R]) loop() {
	defer c.wg.Done()
	group := make([]pending[Q, R], 0, c.max)
	qs := make([]Q, 0, c.max)
	for {
		group, qs = group[:0], qs[:0]
		select {
		case p := <-c.reqs:
			group = append(group, p)
		case <-c.quit:
			return
		}
	gather:
		for len(group) < c.max {
			select {
			case p := <-c.reqs:
				group = append(group, p)
			default:
				break gather
			}
		}
		for _, p := range group {
			qs = append(qs, p.q)
		}
		rs, err := c.run(qs)
		for i, p := range group {
			if err != nil {
				p.out <- outcome[R]{err: err}
			} else {
				p.out <- outcome[R]{r: rs[i]}
			}
		}
	}
}

// run writes one group; a panic becomes the group's error, so no waiter is left hanging.
func (c *coalescer[Q, R]) run(qs []Q) (rs []R, err error) {
	defer func() {
		if p := recover(); p != nil {
			rs, err = nil, fmt.Errorf("executor: group write panicked: %v", p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	rs, err = c.fn(ctx, qs)
	if err == nil && len(rs) != len(qs) {
		err = fmt.Errorf("executor: group write answered %d of %d", len(rs), len(qs))
	}
	return rs, err
}

func (c *coalescer[Q, R]) stop() {
	close(c.quit)
	c.wg.Wait()
}

// groupedStore is a Store whose per-occurrence calls go out in groups; the rest pass
// through.
type groupedStore struct {
	Store
	timers    *coalescer[int64, timerOrErr]
	claims    *coalescer[dao.ClaimParams, dao.ClaimResult]
	records   *coalescer[dao.RecordAttemptParams, error]
	completes *coalescer[completion, struct{}]
}

type completion struct {
	dao.OneShot
	nowMS int64
}

type timerOrErr struct {
	t   dao.Timer
	err error
}

func newGroupedStore(s Store, g GroupStore) *groupedStore {
	return &groupedStore{
		Store: s,
		timers: newCoalescer(dao.MaxGroup, func(ctx context.Context, ids []int64) ([]timerOrErr, error) {
			ts, err := g.GetTimers(ctx, ids)
			if err != nil {
				return nil, err
			}
			out := make([]timerOrErr, len(ids))
			for i, id := range ids {
				if t, ok := ts[id]; ok {
					out[i].t = t
				} else {
					out[i].err = dao.ErrNotFound
				}
			}
			return out, nil
		}),
		claims: newCoalescer(dao.MaxGroup, func(ctx context.Context, ps []dao.ClaimParams) ([]dao.ClaimResult, error) {
			return claimGroup(ctx, g, ps)
		}),
		records: newCoalescer(dao.MaxGroup, g.RecordAttempts),
		completes: newCoalescer(dao.MaxGroup, func(ctx context.Context, cs []completion) ([]struct{}, error) {
			ts := make([]dao.OneShot, len(cs))
			var now int64
			for i, c := range cs {
				ts[i], now = c.OneShot, max(now, c.nowMS)
			}
			return make([]struct{}, len(cs)), g.CompleteOneShots(ctx, ts, now)
		}),
	}
}

// claimGroup claims a group at one instant (the latest of its requests: they were made
// within the group's gathering) and answers a second request for the same occurrence in
// the group as not claimed, so an occurrence never runs twice from one group.
func claimGroup(ctx context.Context, g GroupStore, ps []dao.ClaimParams) ([]dao.ClaimResult, error) {
	var now int64
	for _, p := range ps {
		now = max(now, p.NowMS)
	}
	first := make(map[[2]int64]int, len(ps))
	uniq := make([]dao.ClaimParams, 0, len(ps))
	owner := ps[0].Owner
	for _, p := range ps {
		if p.Owner != owner {
			return nil, errors.New("executor: claim group with two owners")
		}
		k := [2]int64{p.TimerID, p.ScheduledMS}
		if _, dup := first[k]; dup {
			continue
		}
		first[k] = len(uniq)
		p.NowMS = now
		uniq = append(uniq, p)
	}
	rs, err := g.ClaimExecutions(ctx, uniq)
	if err != nil {
		return nil, err
	}
	out := make([]dao.ClaimResult, len(ps))
	used := make(map[[2]int64]bool, len(ps))
	for i, p := range ps {
		k := [2]int64{p.TimerID, p.ScheduledMS}
		out[i] = rs[first[k]]
		if used[k] {
			out[i].Claimed = false
		}
		used[k] = true
	}
	return out, nil
}

func (g *groupedStore) GetTimer(ctx context.Context, id int64) (dao.Timer, error) {
	r, err := g.timers.do(ctx, id)
	if err != nil {
		return dao.Timer{}, err
	}
	return r.t, r.err
}

func (g *groupedStore) ClaimExecution(ctx context.Context, p dao.ClaimParams) (dao.Execution, bool, error) {
	r, err := g.claims.do(ctx, p)
	return r.Existing, r.Claimed, err
}

func (g *groupedStore) RecordAttempt(ctx context.Context, p dao.RecordAttemptParams) error {
	r, err := g.records.do(ctx, p)
	if err != nil {
		return err
	}
	return r
}

// CompleteOneShot is called only for a timer the executor parsed as a one-shot at version
// (see dao.CompleteOneShots).
func (g *groupedStore) CompleteOneShot(ctx context.Context, id, version, nowMS int64) error {
	_, err := g.completes.do(ctx, completion{dao.OneShot{ID: id, Version: version}, nowMS})
	return err
}

func (g *groupedStore) stop() {
	g.timers.stop()
	g.claims.stop()
	g.records.stop()
	g.completes.stop()
}
