package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/panjf2000/ants/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

// ErrStopped is returned by Submit once Stop has begun.
var ErrStopped = errors.New("executor: stopped")

// Store is what the executor needs from dao.Store.
type Store interface {
	GetTimer(ctx context.Context, id int64) (dao.Timer, error)
	ClaimExecution(ctx context.Context, p dao.ClaimParams) (existing dao.Execution, claimed bool, err error)
	FinishExecution(ctx context.Context, p dao.FinishParams) error
	CompleteOneShot(ctx context.Context, id, version, nowMS int64) error
	leaseStore
}

// Config configures an Executor. Zero fields take the defaults named.
type Config struct {
	// InstanceID is written as the owner of the executions this process claims. Required.
	InstanceID string
	// PoolSize is the number of callbacks run at once (the ants pool), and the HTTP client's
	// idle connections per host. Default 1024 (an occurrence holds its slot from its claim, up to ClaimAhead early, to its recorded result).
	PoolSize int
	// ResponseExcerptBytes bounds the response body read and kept per execution; 0 keeps none
	// (conf's default is 1024).
	ResponseExcerptBytes int
	// StopTimeout bounds how long Stop waits for callbacks in flight before cancelling them.
	// Default 10s.
	StopTimeout time.Duration
	// Clock reads time for claims, results and durations. Default: the real clock.
	Clock clockwork.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Transport replaces the HTTP transport (tests). Default: a clone of
	// http.DefaultTransport sized for the pool.
	Transport http.RoundTripper
	// HeartbeatInterval is how often the lease of an execution in flight is renewed.
	// Default 2s.
	HeartbeatInterval time.Duration
	// ResultWriteTimeout bounds how long the result of a callback already made is retried
	// against a failing store before the occurrence is given up as unrecorded. Default 30s.
	ResultWriteTimeout time.Duration
	// Jitter picks a retry delay in [0, max] (full jitter). Default: uniformly random.
	Jitter func(max time.Duration) time.Duration
	// Registerer takes the executor's metrics (the app's /metrics registry). Default: a
	// private registry.
	Registerer prometheus.Registerer
	// ClaimAhead is how early the trigger hands occurrences over (trigger.Config.Lead): when
	// it is set, an occurrence whose time is ahead is claimed at once and called at its
	// time, never before (its lease renewed meanwhile). 0: no occurrence is expected early
	// and each is called at once.
	ClaimAhead time.Duration
	// TimerCacheTTL bounds how long a timer's definition is reused without reading the
	// store (the claim checks its version, so a stale one is only ever retried, never
	// trusted). Default 1m; negative: no cache.
	TimerCacheTTL time.Duration
	// Ungrouped sends each occurrence's store calls alone even when the store can group
	// them (GroupStore; see group.go). For tests and comparisons.
	Ungrouped bool
}

func (c Config) withDefaults() Config {
	if c.PoolSize <= 0 {
		c.PoolSize = 1024
	}
	if c.ResponseExcerptBytes < 0 {
		c.ResponseExcerptBytes = 0
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.ResultWriteTimeout <= 0 {
		c.ResultWriteTimeout = 30 * time.Second
	}
	if c.Jitter == nil {
		c.Jitter = fullJitter
	}
	if c.TimerCacheTTL == 0 {
		c.TimerCacheTTL = time.Minute
	}
	return c
}

// Occurrence is one scheduled time of one timer, as read from the index.
type Occurrence struct {
	TimerID     int64
	ScheduledMS int64
	// Manual: fired by hand (batch trigger), not by the schedule; see dao.Execution.Manual.
	Manual bool
}

// Key is the occurrence's idempotency key.
func (o Occurrence) Key() string { return dao.Key(o.TimerID, o.ScheduledMS) }

// Outcome says how an occurrence ended in the executor.
type Outcome string

const (
	// Succeeded: the callback answered 2xx and the execution is recorded.
	Succeeded Outcome = "succeeded"
	// Failed: the callback failed (non-2xx, timeout, connection error) and it is recorded.
	Failed Outcome = "failed"
	// Skipped: not called, and nothing left to do: the occurrence already has an execution,
	// or the timer no longer has it (disabled, deleted, rescheduled), or this instance lost
	// the execution to another one (its lease was taken over).
	Skipped Outcome = "skipped"
	// Retrying: the attempt failed (or was interrupted by shutdown) and the next attempt is
	// stored (status pending, next_retry_ms): settled, the retry poller of any instance
	// runs it.
	Retrying Outcome = "retrying"
	// Unrecorded: the store failed, so the occurrence may have no record; it must be tried
	// again (the trigger leaves its slice incomplete).
	Unrecorded Outcome = "unrecorded"
)

// Result is what became of one occurrence.
type Result struct {
	Occurrence
	Outcome    Outcome
	Reason     string // why it was skipped or failed
	HTTPStatus int
	Err        error // set when Unrecorded
}

// Recorded reports whether the occurrence is settled in the store.
func (r Result) Recorded() bool { return r.Outcome != Unrecorded }

// Executor runs occurrences on a bounded pool: it checks each against the timer's current
// definition, claims it in the store, calls the callback and records the result.
type Executor struct {
	cfg    Config
	store  Store
	clk    clockwork.Clock
	log    *slog.Logger
	client *http.Client
	pool   *ants.Pool

	sem      chan struct{} // bounds tasks submitted and not finished to PoolSize
	inFlight atomic.Int64
	active   sync.Map // occurrence keys being executed by this process
	leases   leases   // executions in flight here, renewed by the heartbeat loop
	hb       heartbeat
	grouped  *groupedStore // nil when the store's calls go out one by one
	timers   timerCache
	m        *metrics

	// base is the context of every execution: cancelled only when Stop gives up waiting.
	base       context.Context
	cancelBase context.CancelFunc

	mu       sync.RWMutex
	stopped  bool
	stopping chan struct{}
	tasks    sync.WaitGroup
	stopOnce sync.Once
}

// New builds an executor; it runs nothing until Submit or Execute.
func New(cfg Config, store Store) (*Executor, error) {
	cfg = cfg.withDefaults()
	if cfg.InstanceID == "" {
		return nil, errors.New("executor: InstanceID is required")
	}
	log := cfg.Logger.With("component", "executor")
	pool, err := ants.NewPool(cfg.PoolSize, ants.WithPanicHandler(func(p any) {
		// Tasks recover their own panics; this only guards the pool's goroutines.
		log.Error("executor pool task panicked", "panic", fmt.Sprint(p))
	}))
	if err != nil {
		return nil, fmt.Errorf("executor: create pool of %d: %w", cfg.PoolSize, err)
	}
	transport := cfg.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 2 * cfg.PoolSize
		t.MaxIdleConnsPerHost = cfg.PoolSize
		transport = t
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		pool.Release()
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	e := &Executor{
		cfg:   cfg,
		store: store,
		clk:   cfg.Clock,
		log:   log,
		client: &http.Client{
			Transport: transport,
			// A redirect is an answer like any non-2xx: following it would turn a POST into a
			// GET and call a URL the user did not configure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		pool:       pool,
		leases:     leases{m: map[int64]*lease{}},
		timers:     timerCache{m: map[int64]cachedTimer{}, ttl: cfg.TimerCacheTTL},
		sem:        make(chan struct{}, cfg.PoolSize),
		base:       base,
		cancelBase: cancel,
		stopping:   make(chan struct{}),
		m:          m,
	}
	if err := registerPool(cfg.Registerer, e); err != nil {
		cancel()
		pool.Release()
		return nil, err
	}
	if g, ok := store.(GroupStore); ok && !cfg.Ungrouped {
		e.grouped = newGroupedStore(store, g)
		e.store = e.grouped
	}
	return e, nil
}

// Submit runs occ on the pool and calls done with its result from the pool's goroutine (done
// must not block for long). It waits while PoolSize occurrences are running, until ctx ends;
// ErrStopped once Stop has begun. When Submit returns an error, done is never called.
func (e *Executor) Submit(ctx context.Context, occ Occurrence, done func(Result)) error {
	return e.submit(ctx, occ, func() Result { return e.Execute(e.base, occ) }, done)
}

func (e *Executor) submit(ctx context.Context, occ Occurrence, run func() Result, done func(Result)) error {
	e.inFlight.Add(1)
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		e.inFlight.Add(-1)
		return ctx.Err()
	case <-e.stopping:
		e.inFlight.Add(-1)
		return ErrStopped
	}
	e.mu.RLock()
	if e.stopped {
		e.mu.RUnlock()
		<-e.sem
		e.inFlight.Add(-1)
		return ErrStopped
	}
	e.tasks.Add(1)
	e.mu.RUnlock()
	err := e.pool.Submit(func() {
		defer e.tasks.Done()
		defer e.inFlight.Add(-1) // before tasks.Done: nothing is in flight once Stop returns
		res := run()
		<-e.sem
		done(res)
	})
	if err != nil {
		e.tasks.Done()
		<-e.sem
		e.inFlight.Add(-1)
		return fmt.Errorf("executor: submit %s: %w", occ.Key(), err)
	}
	return nil
}

// InFlight is the number of occurrences submitted whose done has not returned yet.
func (e *Executor) InFlight() int { return int(e.inFlight.Load()) }

// Stop refuses new work, waits up to StopTimeout for the callbacks in flight, then cancels
// them (their executions are handed back: pending, due now, for another instance) and waits
// for them to end; then it stops the heartbeat loop. Idempotent.
func (e *Executor) Stop() {
	e.stopOnce.Do(func() {
		e.mu.Lock()
		e.stopped = true
		close(e.stopping)
		e.mu.Unlock()

		drained := make(chan struct{})
		go func() { e.tasks.Wait(); close(drained) }()
		// A real timer on purpose: this bounds a shutdown in wall time, whatever the clock.
		grace := time.NewTimer(e.cfg.StopTimeout)
		select {
		case <-drained:
			grace.Stop()
		case <-grace.C:
			e.log.Warn("callbacks still running at stop; cancelling them", "in_flight", e.InFlight())
			e.cancelBase()
			<-drained
		}
		e.cancelBase()
		e.hb.stop()
		if err := e.pool.ReleaseTimeout(5 * time.Second); err != nil {
			e.log.Warn("executor pool release", "err", err)
		}
		e.client.CloseIdleConnections()
		if e.grouped != nil {
			e.grouped.stop() // after every task: their last writes are in
		}
	})
}

// Execute runs one occurrence synchronously:
//
//  1. load the timer; skip unless it is enabled and its current schedule has the occurrence
//     (so an occurrence stamped for an older definition never fires);
//  2. claim the occurrence in the store at the loaded version (atomic: one row per
//     (timer, scheduled time); an occurrence that has a row is never called again);
//  3. call the callback (one attempt) and record the result;
//  4. a one-shot whose execution ended becomes completed.
//
// Retries (the reliability issue) belong between 3 and 4: further attempts of a claimed
// execution, each through attempt().
func (e *Executor) Execute(ctx context.Context, occ Occurrence) (res Result) {
	res.Occurrence = occ
	// One occurrence runs at most once at a time in this process; that makes it safe below to
	// adopt a running row this instance owns (its earlier run here has ended).
	// The run in flight records the occurrence for its own trigger.
	if _, busy := e.active.LoadOrStore(occ.Key(), struct{}{}); busy {
		return e.skip(occ, "already running in this process")
	}
	defer e.active.Delete(occ.Key())
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("executor panicked", "timer_id", occ.TimerID, "scheduled_ms", occ.ScheduledMS, "panic", fmt.Sprint(p))
			res = Result{Occurrence: occ, Outcome: Unrecorded, Err: fmt.Errorf("executor: panic: %v", p)}
		}
	}()

	d, err := e.definition(ctx, occ.TimerID, false)
	if err != nil {
		return e.unrecorded(occ, "load timer", err)
	}
	if why := d.refuses(occ); why != "" && d.cached {
		// A cached definition only ever says yes: a no is confirmed on the stored one.
		if d, err = e.definition(ctx, occ.TimerID, true); err != nil {
			return e.unrecorded(occ, "load timer", err)
		}
	}
	if why := d.refuses(occ); why != "" {
		return e.skip(occ, why)
	}
	exec, claimed, err := e.claim(ctx, occ, d.t)
	if err == nil && !claimed && d.cached {
		// Not inserted at the cached version: the timer changed since it was cached, or the
		// occurrence has an execution already. Either way decide again on the stored
		// definition: the checks below (adopting our own row, completing a one-shot) must
		// never rest on a cached one.
		if d, err = e.definition(ctx, occ.TimerID, true); err != nil {
			return e.unrecorded(occ, "load timer", err)
		}
		if why := d.refuses(occ); why != "" {
			return e.skip(occ, why)
		}
		if exec.ID == 0 {
			exec, claimed, err = e.claim(ctx, occ, d.t)
		}
	}
	if err != nil {
		return e.unrecorded(occ, "claim", err)
	}
	t, sched := d.t, d.sched
	// Adopt only a first attempt of a scheduled occurrence: a later attempt or a manual
	// execution running under this owner was claimed by the poller, whose run may still be
	// waiting for a pool slot.
	if !claimed && exec.Status == dao.ExecRunning && exec.Owner == e.cfg.InstanceID && exec.TimerVersion == t.Version &&
		exec.Attempt == 1 && !exec.Manual {
		// Claimed here before, but the claim's answer or the result's write was lost (store
		// timeout): no run of it is in flight here (active above), so run it now rather than
		// leave it to the takeover. Executions owned by other instances are the takeover's:
		// they are reset once their heartbeat is stale (Poller).
		claimed = true
		e.log.Info("adopting an unfinished execution of this instance", "execution_id", exec.ID, "key", occ.Key())
	}
	if !claimed {
		if exec.ID == 0 {
			return e.skip(occ, "timer changed")
		}
		// A one-shot whose execution ended earlier but was not completed (the store failed
		// then) is completed now, so it stops being stamped.
		if sched.Kind() == schedule.KindAt && (exec.Status == dao.ExecSucceeded || exec.Status == dao.ExecFailed) {
			if err := e.completeOneShot(ctx, t.ID, t.Version); err != nil {
				return e.unrecorded(occ, "complete one-shot", err)
			}
		}
		return e.skip(occ, "already executed (execution "+fmt.Sprint(exec.ID)+", "+exec.Status+")")
	}
	// Claimed ahead of its time (the trigger hands occurrences over ClaimAhead early, so the
	// store's latency is not the callback's): call it at its millisecond, never before. The
	// lease is renewed meanwhile, so no other instance takes the execution over.
	if wait := time.UnixMilli(occ.ScheduledMS).Sub(e.clk.Now()); wait > 0 && e.cfg.ClaimAhead > 0 {
		l := e.leases.add(exec.ID, e.clk.Now())
		select {
		case <-e.clk.After(wait):
		case <-ctx.Done():
			e.leases.remove(exec.ID)
			return e.handBack(context.WithoutCancel(ctx), occ, exec.ID)
		}
		e.leases.remove(exec.ID)
		if l.lost.Load() {
			return e.skip(occ, "lost the execution to another instance")
		}
	}
	return e.run(ctx, t, sched, exec)
}

// run makes attempt exec.Attempt of an execution this instance holds (running, owned here),
// renewing its lease meanwhile, and records it: succeeded; failed for good (not retryable,
// or the last attempt); or pending with the next attempt's time (Retrying). An execution
// whose lease was taken over is not written (Skipped): the new owner's result stands.
func (e *Executor) run(ctx context.Context, t dao.Timer, sched schedule.Schedule, exec dao.Execution) Result {
	occ := Occurrence{TimerID: exec.TimerID, ScheduledMS: exec.ScheduledMS, Manual: exec.Manual}
	l := e.leases.add(exec.ID, e.clk.Now())
	defer e.leases.remove(exec.ID)

	started := e.clk.Now()
	a := e.attempt(ctx, t, occ, exec.Attempt)
	e.m.attempted(occ, exec.Attempt, started, a.duration)
	if l.lost.Load() {
		return e.skip(occ, "lost the execution to another instance")
	}
	nowMS := e.clk.Now().UnixMilli()
	if !a.ok() && e.base.Err() != nil {
		// Cut short by Stop: hand it back, due at once, for another instance.
		return e.handBack(ctx, occ, exec.ID)
	}
	policy := retryPolicy(t.Retry)
	res := Result{Occurrence: occ, Outcome: Succeeded, HTTPStatus: a.httpStatus}
	rec := dao.RecordAttemptParams{
		ID:         exec.ID,
		Owner:      e.cfg.InstanceID,
		Attempt:    exec.Attempt,
		Status:     dao.ExecSucceeded,
		HTTPStatus: a.httpStatus,
		Error:      a.err,
		Response:   a.response,
		StartedMS:  started.UnixMilli(),
		DurationMS: a.duration.Milliseconds(),
		NowMS:      nowMS,
	}
	switch {
	case a.ok():
	case a.retryable && exec.Attempt < policy.MaxAttempts:
		delay := e.backoff(policy, exec.Attempt)
		rec.Status, rec.NextRetryMS = dao.ExecPending, nowMS+max(delay.Milliseconds(), 1)
		res.Outcome, res.Reason = Retrying, a.err
	default:
		rec.Status = dao.ExecFailed
		res.Outcome, res.Reason = Failed, a.err
	}
	// The callback has been made: try hard to record it, since a lost result means calling
	// it again later.
	if err := e.record(ctx, l, rec); errors.Is(err, dao.ErrNotFound) || errors.Is(err, errLeaseLost) {
		return e.skip(occ, "lost the execution to another instance before recording")
	} else if err != nil {
		return e.unrecorded(occ, "record result", err)
	}
	// A one-shot fired by hand keeps its own scheduled occurrence.
	if sched.Kind() == schedule.KindAt && rec.Status != dao.ExecPending && !exec.Manual {
		if err := e.completeOneShot(ctx, t.ID, t.Version); err != nil {
			return e.unrecorded(occ, "complete one-shot", err)
		}
	}
	e.log.Debug("occurrence attempted", "timer_id", occ.TimerID, "scheduled_at", schedule.FormatTime(time.UnixMilli(occ.ScheduledMS)),
		"attempt", exec.Attempt, "status", rec.Status, "http_status", a.httpStatus, "duration_ms", a.duration.Milliseconds(),
		"error", a.err, "next_retry_ms", rec.NextRetryMS)
	e.m.count(res.Outcome)
	return res
}

func (e *Executor) completeOneShot(ctx context.Context, id, version int64) error {
	wctx, cancel := writeContext(ctx)
	defer cancel()
	return e.store.CompleteOneShot(wctx, id, version, e.clk.Now().UnixMilli())
}

// writeContext outlives a cancelled execution context for a few seconds, so a callback cut
// short at shutdown still gets its result recorded.
func writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

func (e *Executor) skip(occ Occurrence, reason string) Result {
	e.log.Debug("occurrence skipped", "timer_id", occ.TimerID, "scheduled_ms", occ.ScheduledMS, "reason", reason)
	e.m.count(Skipped)
	return Result{Occurrence: occ, Outcome: Skipped, Reason: reason}
}

func (e *Executor) unrecorded(occ Occurrence, doing string, err error) Result {
	err = fmt.Errorf("executor: %s %s: %w", doing, occ.Key(), err)
	if !errors.Is(err, context.Canceled) {
		e.log.Warn("occurrence not recorded", "timer_id", occ.TimerID, "scheduled_ms", occ.ScheduledMS, "err", err)
	}
	e.m.count(Unrecorded)
	e.m.storeError(componentExecutor, err)
	return Result{Occurrence: occ, Outcome: Unrecorded, Err: err}
}
