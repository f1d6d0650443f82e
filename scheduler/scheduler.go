package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/index"
	"github.com/tockd/tock/trigger"
)

// Lock timing, in slice lengths T (one minute).
const (
	// LockTTL: a slice's lock expires 1.5T after the slice starts unless its run completes.
	// Between 1T and 2T, so an incomplete run's lock is free again during the next minute,
	// when the slice is that minute's previous slice and is re-run.
	LockTTL = index.SliceLen * 3 / 2
	// DoneTTL: a completed run extends its lock to 2.5T from then, past the next minute, so
	// the previous-slice pass never runs a completed slice again.
	DoneTTL = index.SliceLen * 5 / 2
	// Margin: a trigger stops working its slice this long before its lock can expire, so
	// no two instances work one slice at once (clocks must agree within it).
	Margin = 5 * time.Second
	// Prefetch: how long before a minute starts its slices are taken.
	Prefetch = 8 * time.Second
	// DefaultLeaseTTL and DefaultLeaseRenew: a slice's lock is a lease of LeaseTTL that its
	// trigger renews every LeaseRenew while it runs, up to the hard expiry above (LockTTL);
	// a crashed owner's slice is free again within LeaseTTL, and the instances that poll
	// every second take it over.
	DefaultLeaseTTL   = 5 * time.Second
	DefaultLeaseRenew = time.Second
)

// Config configures a Scheduler.
type Config struct {
	// Buckets is the number of slices per minute. Required, the same on every instance.
	Buckets int
	// Grace, Poll and Lead are passed to the triggers (trigger.DefaultGrace, DefaultPoll;
	// Lead 0).
	Grace, Poll, Lead time.Duration
	// LeaseTTL and LeaseRenew time the slice lease (DefaultLeaseTTL, DefaultLeaseRenew).
	// A trigger stops working its slice LeaseTTL/2 (at most Margin) before its lease can
	// expire.
	LeaseTTL, LeaseRenew time.Duration
	Clock                clockwork.Clock
	Logger               *slog.Logger
	// OnSliceDone, when set, is called after a slice's run completed (every occurrence
	// recorded); the compensator records the slice in slice_done so it is never scanned.
	// ctx is bounded; it must not block for long.
	OnSliceDone func(ctx context.Context, sl index.Slice)
	// Registerer takes the scheduler's and its triggers' metrics (the app's /metrics
	// registry). Default: a private registry.
	Registerer prometheus.Registerer
}

// Scheduler takes the slices of the current and previous minute each second and runs a
// trigger for each slice it gets.
type Scheduler struct {
	cfg  Config
	idx  *index.Index
	rdb  redis.UniversalClient
	keys index.Keys
	exec trigger.Submitter
	clk  clockwork.Clock
	log  *slog.Logger
	m    *metrics

	mu      sync.Mutex
	running map[string]bool // lock keys of slices this process is working
	runCtx  context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
	stopped bool
}

// New returns a scheduler over idx that submits to exec; nothing runs until Start.
func New(cfg Config, idx *index.Index, exec trigger.Submitter) (*Scheduler, error) {
	if cfg.Buckets < 1 {
		return nil, fmt.Errorf("scheduler: buckets %d: must be at least 1", cfg.Buckets)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.LeaseRenew <= 0 {
		cfg.LeaseRenew = DefaultLeaseRenew
	}
	if cfg.LeaseRenew >= cfg.LeaseTTL/2 {
		return nil, fmt.Errorf("scheduler: lease renew interval %s must be under half the lease TTL %s", cfg.LeaseRenew, cfg.LeaseTTL)
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Scheduler{
		cfg:     cfg,
		idx:     idx,
		rdb:     idx.Client(),
		keys:    idx.Keys(),
		exec:    exec,
		clk:     cfg.Clock,
		log:     cfg.Logger.With("component", "scheduler"),
		running: map[string]bool{},
	}
	var err error
	if s.m, err = newMetrics(cfg.Registerer, s.Running); err != nil {
		return nil, err
	}
	return s, nil
}

// Start begins taking slices every second, aligned to the clock's whole seconds. It returns
// at once. The scheduler and its triggers run until Stop (not until ctx ends: ctx only
// carries values).
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("scheduler: already started")
	}
	s.started = true
	s.runCtx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.wg.Add(1)
	go s.loop(s.runCtx)
	return nil
}

// Stop stops taking slices, cancels the triggers and waits for them; the locks of slices
// not completed are released, so another instance takes them over at once. Idempotent.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	if !s.started || s.stopped {
		s.stopped = true
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.cancel()
	s.mu.Unlock()
	s.wg.Wait()
}

// Running is the number of slices this process is working.
func (s *Scheduler) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

func (s *Scheduler) loop(ctx context.Context) {
	defer s.wg.Done()
	var timer clockwork.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	failing := false
	for {
		now := s.clk.Now()
		err := s.RunOnce(ctx, now)
		if err != nil && !failing && ctx.Err() == nil {
			s.log.Warn("taking slices failed; retrying every second", "err", err)
		}
		failing = err != nil
		// The next whole second, from the clock after the work: a slow pass skips a tick
		// instead of running twice in a row.
		now = s.clk.Now()
		wait := now.Truncate(time.Second).Add(time.Second).Sub(now)
		if timer == nil {
			timer = s.clk.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.Chan():
		}
	}
}

// RunOnce tries, for every bucket starting at a random one (so instances spread over the
// buckets), the current minute's slice and the previous minute's, and starts a trigger for
// each lock it gets. The previous slice's lock is free only if its run did not complete
// (or never happened): it is run again. In the last Prefetch of a minute it also takes the
// next minute's slices ahead of time, a few per pass (see prefetch). It stops at the first
// Redis error.
func (s *Scheduler) RunOnce(ctx context.Context, now time.Time) error {
	cur := index.SliceStart(now)
	off := rand.IntN(s.cfg.Buckets)
	for i := range s.cfg.Buckets {
		b := (off + i) % s.cfg.Buckets
		current := index.Slice{Start: cur, Bucket: b}
		// The current slice's lock expires LockTTL after the slice's start, whenever it is
		// taken, so that an incomplete run is retried within the next minute; a previous
		// slice gets a full LockTTL for its re-run.
		if _, err := s.take(ctx, current, current.Start.Add(LockTTL).Sub(now), now); err != nil {
			return err
		}
		if _, err := s.take(ctx, current.Prev(), LockTTL, now); err != nil {
			return err
		}
	}
	return s.prefetch(ctx, cur.Add(index.SliceLen), off, now)
}

// prefetch takes the next minute's slices before the minute starts, so their triggers are
// already waiting at the minute's first millisecond. Each pass takes at most
// ceil(buckets / passes left) of them: a lone instance has them all by the last pass, and
// instances polling the same second share them instead of the fastest taking every bucket.
func (s *Scheduler) prefetch(ctx context.Context, next time.Time, off int, now time.Time) error {
	until := next.Sub(now)
	if until > Prefetch {
		return nil
	}
	passes := int((until + time.Second - 1) / time.Second)
	quota := (s.cfg.Buckets + passes - 1) / max(passes, 1)
	for i := 0; i < s.cfg.Buckets && quota > 0; i++ {
		sl := index.Slice{Start: next, Bucket: (off + i) % s.cfg.Buckets}
		took, err := s.take(ctx, sl, next.Add(LockTTL).Sub(now), now)
		if err != nil {
			return err
		}
		if took {
			quota--
		}
	}
	return nil
}

// take tries the slice's lock as a lease of LeaseTTL that its trigger renews up to the hard
// expiry now+ttl.
func (s *Scheduler) take(ctx context.Context, sl index.Slice, ttl time.Duration, now time.Time) (bool, error) {
	key := s.keys.SliceLock(sl)
	s.mu.Lock()
	if s.running[key] || s.stopped {
		s.mu.Unlock()
		return false, nil
	}
	s.mu.Unlock()
	hard := now.Add(ttl)
	lock, ok, err := index.TryLock(ctx, s.rdb, key, min(ttl, s.cfg.LeaseTTL), now)
	if err != nil || !ok {
		return false, err
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.release(lock, sl)
		return false, nil
	}
	s.running[key] = true
	s.m.taken.Inc()
	s.wg.Add(1)
	s.mu.Unlock()
	go s.work(ctx, sl, lock, hard)
	return true, nil
}

// work runs the slice's trigger, then extends the lock past 2T when the run completed, or
// releases it when the run was cut short by Stop.
func (s *Scheduler) work(ctx context.Context, sl index.Slice, lock *index.Lock, hard time.Time) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.running, lock.Key)
		s.mu.Unlock()
	}()
	s.log.Debug("slice taken", "slice", sl.String(), "lock_expiry", lock.Expiry())
	sum := trigger.New(trigger.Config{
		Slice:      sl,
		Deadline:   lock.Expiry().Add(-s.leaseMargin()),
		Renew:      s.renewer(sl, lock, hard),
		RenewEvery: s.cfg.LeaseRenew,
		Grace:      s.cfg.Grace,
		Poll:       s.cfg.Poll,
		Lead:       s.cfg.Lead,
		Clock:      s.clk,
		Logger:     s.cfg.Logger,
		Metrics:    s.m.triggers,
	}, s.idx, s.exec).Run(ctx)

	if sum.Complete {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		ok, err := lock.Extend(wctx, DoneTTL, s.clk.Now())
		switch {
		case err != nil:
			s.log.Warn("extend completed slice lock; the slice may run again", "slice", sl.String(), "err", err)
			s.m.lockError(opExtend)
		case !ok:
			s.log.Warn("completed slice lock was lost; the slice may run again", "slice", sl.String())
			s.m.lost.Inc()
		default:
			s.m.extend(extendComplete)
			s.log.Debug("slice done", "slice", sl.String(), "succeeded", sum.Succeeded, "failed", sum.Failed, "skipped", sum.Skipped)
		}
		if s.cfg.OnSliceDone != nil {
			s.cfg.OnSliceDone(wctx, sl)
		}
		return
	}
	if ctx.Err() != nil {
		s.release(lock, sl)
	}
}

func (s *Scheduler) release(lock *index.Lock, sl index.Slice) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := lock.Release(ctx); err != nil {
		s.log.Warn("release slice lock at stop", "slice", sl.String(), "err", err)
		s.m.lockError(opRelease)
	}
}

func (s *Scheduler) leaseMargin() time.Duration { return min(Margin, s.cfg.LeaseTTL/2) }

// renewer returns the trigger's Renew: it extends the slice lease by LeaseTTL, never past
// the hard expiry, and returns the trigger's new deadline. It runs on the trigger's
// goroutine, the only one touching lock while the trigger runs.
func (s *Scheduler) renewer(sl index.Slice, lock *index.Lock, hard time.Time) func(context.Context, time.Time) time.Time {
	failing := false
	return func(ctx context.Context, now time.Time) time.Time {
		ttl := min(s.cfg.LeaseTTL, hard.Sub(now))
		if ttl < time.Millisecond {
			return lock.Expiry().Add(-s.leaseMargin())
		}
		ok, err := lock.Extend(ctx, ttl, now)
		switch {
		case err != nil:
			if !failing && ctx.Err() == nil {
				s.log.Warn("renew slice lease; retrying", "slice", sl.String(), "err", err)
			}
			failing = true
			if ctx.Err() == nil {
				s.m.lockError(opRenew)
			}
		case !ok:
			// Expired (or Redis lost it) and maybe taken by another instance: stop working
			// the slice now; whoever holds it, or the next poll, runs it.
			s.log.Warn("slice lease lost", "slice", sl.String())
			s.m.lost.Inc()
			return now
		default:
			failing = false
			s.m.extend(extendRenew)
		}
		return lock.Expiry().Add(-s.leaseMargin())
	}
}
