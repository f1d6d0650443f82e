package executor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

// Reliability defaults (see conf: engine.heartbeat_interval, engine.missed_heartbeats,
// engine.retry_poll).
const (
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultMissedHeartbeats  = 3
	DefaultRetryPoll         = time.Second
)

// Retry policy defaults, applied to a timer whose policy leaves a field zero.
const (
	DefaultMaxAttempts = 3
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = time.Minute
)

// errLeaseLost: the heartbeat found the execution owned by someone else.
var errLeaseLost = errors.New("executor: lease lost")

// leaseStore is what leases, retries and the takeover need from dao.Store.
type leaseStore interface {
	RenewExecution(ctx context.Context, id int64, owner string, nowMS int64) (bool, error)
	RecordAttempt(ctx context.Context, p dao.RecordAttemptParams) error
	HandBackExecution(ctx context.Context, id int64, owner string, nowMS int64) error
}

// lease is one execution in flight here.
type lease struct {
	id   int64
	last time.Time   // last successful renewal (or the claim); under leases.mu
	lost atomic.Bool // set when a renewal found another owner: the result must not be written
}

type leases struct {
	mu sync.Mutex
	m  map[int64]*lease
}

func (ls *leases) add(id int64, now time.Time) *lease {
	l := &lease{id: id, last: now}
	ls.mu.Lock()
	ls.m[id] = l
	ls.mu.Unlock()
	return l
}

func (ls *leases) remove(id int64) {
	ls.mu.Lock()
	delete(ls.m, id)
	ls.mu.Unlock()
}

// heartbeat is the executor's lease renewal loop.
type heartbeat struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (h *heartbeat) stop() {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel = nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Start starts the heartbeat loop, which renews the lease of every execution in flight here
// each HeartbeatInterval; it returns at once. Stop ends it after the callbacks in flight.
// Without Start, executions are not renewed (fine for callbacks much shorter than the
// takeover threshold, as in unit tests).
func (e *Executor) Start(ctx context.Context) error {
	e.hb.mu.Lock()
	defer e.hb.mu.Unlock()
	if e.hb.done != nil {
		return errors.New("executor: already started")
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.hb.cancel, e.hb.done = cancel, make(chan struct{})
	done := e.hb.done
	go func() {
		defer close(done)
		ticker := e.clk.NewTicker(e.cfg.HeartbeatInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.Chan():
				e.RenewLeases(ctx, e.clk.Now())
			}
		}
	}()
	return nil
}

// RenewLeases renews (compare-and-set on the owner) the lease of every execution in flight
// here not renewed for half a HeartbeatInterval. One found owned by another instance is
// marked lost: its run will not write its result. A store error leaves the lease as it is
// (it is retried at the next beat; the takeover decides if it lasts).
func (e *Executor) RenewLeases(ctx context.Context, now time.Time) {
	e.leases.mu.Lock()
	var due []*lease
	for _, l := range e.leases.m {
		if now.Sub(l.last) >= e.cfg.HeartbeatInterval/2 && !l.lost.Load() {
			due = append(due, l)
		}
	}
	e.leases.mu.Unlock()
	for _, l := range due {
		wctx, cancel := context.WithTimeout(ctx, e.cfg.HeartbeatInterval)
		held, err := e.store.RenewExecution(wctx, l.id, e.cfg.InstanceID, now.UnixMilli())
		cancel()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				e.log.Warn("renew execution lease", "execution_id", l.id, "err", err)
				e.m.storeError(componentExecutor, err)
			}
		case !held:
			l.lost.Store(true)
			e.log.Warn("execution taken over by another instance; its result will not be written", "execution_id", l.id)
		default:
			e.leases.mu.Lock()
			l.last = now
			e.leases.mu.Unlock()
		}
	}
}

// policy is a timer's retry policy with the defaults filled in.
type policy struct {
	MaxAttempts         int
	Backoff, MaxBackoff time.Duration
}

// retryPolicy fills a timer's zero retry fields with the defaults.
func retryPolicy(p dao.RetryPolicy) (out policy) {
	out.MaxAttempts, out.Backoff, out.MaxBackoff = p.MaxAttempts, time.Duration(p.BackoffMS)*time.Millisecond,
		time.Duration(p.MaxBackoffMS)*time.Millisecond
	if out.MaxAttempts <= 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.Backoff <= 0 {
		out.Backoff = DefaultBackoff
	}
	if out.MaxBackoff <= 0 {
		out.MaxBackoff = DefaultMaxBackoff
	}
	out.MaxBackoff = max(out.MaxBackoff, out.Backoff)
	return out
}

// BackoffCap is the largest delay after failed attempt n (1-based): backoff * 2^(n-1),
// at most maxBackoff. The delay itself is drawn in [0, cap] (full jitter).
func BackoffCap(backoff, maxBackoff time.Duration, n int) time.Duration {
	d := backoff
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

func (e *Executor) backoff(p policy, n int) time.Duration {
	return e.cfg.Jitter(BackoffCap(p.Backoff, p.MaxBackoff, n))
}

func fullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// record writes an attempt's outcome, retrying a failing store with backoff for up to
// ResultWriteTimeout (wall time: it waits out a real outage). ErrNotFound or errLeaseLost:
// another instance holds the execution now.
func (e *Executor) record(ctx context.Context, l *lease, p dao.RecordAttemptParams) error {
	deadline := time.Now().Add(e.cfg.ResultWriteTimeout)
	wait := 100 * time.Millisecond
	for {
		wctx, cancel := writeContext(ctx)
		err := e.store.RecordAttempt(wctx, p)
		cancel()
		if err == nil || errors.Is(err, dao.ErrNotFound) {
			return err
		}
		if l.lost.Load() {
			return errLeaseLost
		}
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		e.m.storeError(componentExecutor, err)
		e.log.Warn("record attempt; retrying", "execution_id", p.ID, "attempt", p.Attempt, "err", err, "retry_in", wait)
		// A real timer: the store's outage happens in wall time.
		t := time.NewTimer(wait)
		<-t.C
		wait = min(2*wait, 2*time.Second)
	}
}

// handBack returns an execution cut short by Stop to pending, due now, so that another
// instance's poller runs it at once.
func (e *Executor) handBack(ctx context.Context, occ Occurrence, id int64) Result {
	wctx, cancel := writeContext(ctx)
	defer cancel()
	// Due now, or at its time if that is still ahead (claimed ahead): never run early.
	err := e.store.HandBackExecution(wctx, id, e.cfg.InstanceID, max(e.clk.Now().UnixMilli(), occ.ScheduledMS))
	if errors.Is(err, dao.ErrNotFound) {
		return e.skip(occ, "lost the execution to another instance")
	}
	if err != nil {
		// Left running: the takeover resets it once its heartbeat is stale.
		return e.unrecorded(occ, "hand back at stop", err)
	}
	e.log.Info("execution handed back at stop", "execution_id", id, "key", occ.Key())
	e.m.count(Retrying)
	return Result{Occurrence: occ, Outcome: Retrying, Reason: "handed back at stop"}
}

// SubmitClaimed runs the next attempt of an execution this instance has just claimed
// (running, owned here, attempt already incremented: ClaimDueRetries) on the pool, like
// Submit. When it returns an error the execution was not started: the caller hands it back.
func (e *Executor) SubmitClaimed(ctx context.Context, exec dao.Execution, done func(Result)) error {
	occ := Occurrence{TimerID: exec.TimerID, ScheduledMS: exec.ScheduledMS}
	return e.submit(ctx, occ, func() Result { return e.RunClaimed(e.base, exec) }, done)
}

// RunClaimed runs the next attempt of a claimed execution synchronously. A timer that no
// longer has the occurrence (deleted, disabled, rescheduled) ends it failed without a call.
func (e *Executor) RunClaimed(ctx context.Context, exec dao.Execution) (res Result) {
	occ := Occurrence{TimerID: exec.TimerID, ScheduledMS: exec.ScheduledMS}
	if _, busy := e.active.LoadOrStore(occ.Key(), struct{}{}); busy {
		// An older run of it is still in flight here (it lost its lease): let the poller
		// claim it again once that run is gone.
		return e.handBack(ctx, occ, exec.ID)
	}
	defer e.active.Delete(occ.Key())
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("executor panicked", "execution_id", exec.ID, "panic", fmt.Sprint(p))
			res = Result{Occurrence: occ, Outcome: Unrecorded, Err: fmt.Errorf("executor: panic: %v", p)}
		}
	}()
	t, err := e.store.GetTimer(ctx, occ.TimerID)
	var why string
	switch {
	case errors.Is(err, dao.ErrNotFound):
		why = "timer deleted"
	case err != nil:
		return e.unrecorded(occ, "load timer", err)
	case t.Status != dao.StatusEnabled:
		why = "timer " + t.Status
	}
	var sched schedule.Schedule
	if why == "" {
		sched, err = schedule.Parse(schedule.Spec(t.Schedule), time.UnixMilli(t.AnchorMS))
		// A manual execution is not an occurrence of the schedule by design.
		if err != nil || !exec.Manual && !schedule.Has(sched, time.UnixMilli(occ.ScheduledMS)) {
			why = "not an occurrence of the timer's current schedule"
		}
	}
	if why != "" {
		l := e.leases.add(exec.ID, e.clk.Now())
		defer e.leases.remove(exec.ID)
		nowMS := e.clk.Now().UnixMilli()
		err := e.record(ctx, l, dao.RecordAttemptParams{ID: exec.ID, Owner: e.cfg.InstanceID, Attempt: exec.Attempt,
			Status: dao.ExecFailed, Error: "retry abandoned: " + why, StartedMS: nowMS, NowMS: nowMS})
		if err != nil && !errors.Is(err, dao.ErrNotFound) {
			return e.unrecorded(occ, "abandon retry", err)
		}
		return e.skip(occ, why)
	}
	return e.run(ctx, t, sched, exec)
}
