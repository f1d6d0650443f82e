package compensator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/index"
)

// Defaults of Config (seed 000's numbers, except CatchUpWindow and Rate).
const (
	DefaultGrace         = 10 * time.Minute
	DefaultQuiet         = time.Minute
	DefaultFastInterval  = 10 * time.Second
	DefaultSlowInterval  = 10 * time.Minute
	DefaultStuckAfter    = 2 * time.Minute
	DefaultCatchUpWindow = time.Hour
	DefaultRate          = 100
	DefaultMaxPerPass    = 10000
)

// settle is how long after its start a slice can still be worked by a trigger: the
// scheduler re-runs an incomplete slice during the next minute under a lock of
// scheduler.LockTTL (1.5T) taken then, so no trigger touches a slice 2.5T after its start.
// Only slices older than that are compensated, so the loop never races a trigger.
const settle = index.SliceLen * 5 / 2

// timerPage is how many timers one store read returns while rebuilding expectations.
const timerPage = 500

// Store is what the compensator needs from dao.Store.
type Store interface {
	ListStuckExecutions(ctx context.Context, beforeMS int64, limit int) ([]dao.Execution, error)
	ListSlicesDone(ctx context.Context, fromMS, toMS int64) ([]dao.SliceDone, error)
	SliceDoneBounds(ctx context.Context) (firstMS, lastMS int64, ok bool, err error)
	MarkSliceDone(ctx context.Context, d dao.SliceDone) error
	PruneSlicesDone(ctx context.Context, beforeMS int64) (int64, error)
	ListEnabledTimers(ctx context.Context, afterID int64, limit int) ([]dao.Timer, error)
	ExistingOccurrences(ctx context.Context, timerIDs []int64, fromMS, toMS int64) ([]dao.Occurrence, error)
	RecordMissed(ctx context.Context, p dao.MissedParams) (bool, error)
}

var _ Store = (*dao.Store)(nil)

// Executor is the normal execution path (*executor.Executor): claim, call, record.
type Executor interface {
	Submit(ctx context.Context, occ executor.Occurrence, done func(executor.Result)) error
}

var _ Executor = (*executor.Executor)(nil)

// Deps are the compensator's collaborators. All are required.
type Deps struct {
	Store    Store
	Executor Executor
	// Keys gives the bucket count and each timer's bucket (index.Keys.Bucket).
	Keys index.Keys
}

// Config configures a Compensator. Zero durations and counts take the defaults named.
type Config struct {
	// InstanceID is written as the owner of the missed rows and slice records. Required.
	InstanceID string
	// Grace: no scheduled pass until this long after Start. Default 10m.
	Grace time.Duration
	// Quiet: no scheduled pass until this long after the last NoteTakeover. Default 1m.
	Quiet time.Duration
	// FastInterval separates passes while they find work; SlowInterval once one finds
	// nothing. Defaults 10s and 10m.
	FastInterval, SlowInterval time.Duration
	// StuckAfter: a pending or running execution unchanged this long is re-driven. Default 2m.
	StuckAfter time.Duration
	// CatchUpWindow: missed occurrences younger than this follow the timer's misfire policy;
	// older ones are recorded missed. Default 1h.
	CatchUpWindow time.Duration
	// Rate caps re-driven occurrences per second (burst: the same number). Default 100.
	Rate int
	// MaxPerPass caps the occurrences one pass re-drives or records. Default 10000.
	MaxPerPass int
	Clock      clockwork.Clock
	Logger     *slog.Logger
	// Registerer takes the compensator's metrics (the app's /metrics registry). Default: a
	// private registry.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Quiet, DefaultQuiet)
	def(&c.FastInterval, DefaultFastInterval)
	def(&c.SlowInterval, DefaultSlowInterval)
	def(&c.StuckAfter, DefaultStuckAfter)
	def(&c.CatchUpWindow, DefaultCatchUpWindow)
	if c.Grace < 0 {
		c.Grace = 0
	}
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	if c.MaxPerPass <= 0 {
		c.MaxPerPass = DefaultMaxPerPass
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Pass kinds.
const (
	KindCatchUp   = "catch_up"  // the one at start-up: also records older-than-window misses
	KindScheduled = "scheduled" // by the loop's timing rules
	KindManual    = "manual"    // RunNow (the admin API)
)

// Report is what one pass found and did.
type Report struct {
	Kind     string
	At       time.Time
	Duration time.Duration
	// Stuck executions (pending/running past StuckAfter) found; Missing occurrences with no
	// execution found in slices not recorded done.
	Stuck, Missing int
	// Redriven were handed to the executor; Missed were recorded missed (misfire policy or
	// older than the catch-up window).
	Redriven, Missed int
	// Outcomes of the re-driven ones.
	Succeeded, Failed, Skipped, Unrecorded int
	// SlicesScanned: undone slices whose occurrences were recomputed; SlicesDone: slices of
	// the range already recorded done (not scanned); Deferred: occurrences left for the next
	// pass by MaxPerPass.
	SlicesScanned, SlicesDone, Deferred int
	// Err is the error that ended the pass early, if any.
	Err string
}

// Found is the work the pass found; zero makes the loop slow down.
func (r Report) Found() int { return r.Stuck + r.Missing + r.Deferred }

// Status is the loop's state (GET /api/v1/admin/compensation).
type Status struct {
	InstanceID   string
	StartedAt    time.Time
	Uptime       time.Duration
	LastTakeover time.Time // zero when none
	Interval     time.Duration
	NextPassAt   time.Time // zero before Start
	Passes       int
	LastPass     *Report
}

// Compensator finds work that should have happened and did not, and re-drives it.
type Compensator struct {
	cfg   Config
	store Store
	exec  Executor
	keys  index.Keys
	clk   clockwork.Clock
	log   *slog.Logger
	lim   *rate.Limiter
	m     *metrics

	passMu sync.Mutex // one pass at a time (loop or RunNow)
	// firedOnce: per fire_once timer, the latest missed occurrence this process fired, so a
	// later pass reaching older ones records them missed. Guarded by passMu.
	firedOnce map[int64]int64

	mu           sync.Mutex
	startedAt    time.Time
	lastTakeover time.Time
	lastPass     *Report
	passes       int
	interval     time.Duration
	nextPassAt   time.Time
	started      bool
	stopped      bool
	cancel       context.CancelFunc
	done         chan struct{}
}

// New builds a compensator; nothing runs until Start (RunOnce and RunNow work without it).
func New(cfg Config, deps Deps) (*Compensator, error) {
	cfg = cfg.withDefaults()
	if cfg.InstanceID == "" {
		return nil, errors.New("compensator: InstanceID is required")
	}
	if deps.Store == nil || deps.Executor == nil {
		return nil, errors.New("compensator: Deps.Store and Deps.Executor are required")
	}
	if cfg.SlowInterval < cfg.FastInterval {
		return nil, fmt.Errorf("compensator: slow interval %s shorter than fast interval %s", cfg.SlowInterval, cfg.FastInterval)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Compensator{
		m:         m,
		cfg:       cfg,
		store:     deps.Store,
		exec:      deps.Executor,
		keys:      deps.Keys,
		clk:       cfg.Clock,
		log:       cfg.Logger.With("component", "compensator"),
		lim:       rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Rate),
		firedOnce: map[int64]int64{},
		interval:  cfg.FastInterval,
	}, nil
}

// Start records the start time (the grace period counts from it) and starts the loop: the
// start-up catch-up, then scheduled passes. It returns at once; the loop runs until Stop.
func (c *Compensator) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("compensator: already started")
	}
	c.started = true
	c.startedAt = c.clk.Now()
	ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c.done = make(chan struct{})
	go c.loop(ctx)
	return nil
}

// Stop ends the loop, waiting for a pass in progress (its callbacks included). Idempotent.
func (c *Compensator) Stop() {
	c.mu.Lock()
	if !c.started || c.stopped {
		c.stopped = true
		c.mu.Unlock()
		return
	}
	c.stopped = true
	c.cancel()
	c.mu.Unlock()
	<-c.done
}

// NoteTakeover tells the loop that this instance just took over executions (the takeover
// calls it), so no scheduled pass starts within Quiet of it: compensating while takeovers
// are still under way would re-drive what they are about to pick up.
func (c *Compensator) NoteTakeover() {
	now := c.clk.Now()
	c.mu.Lock()
	c.lastTakeover = now
	c.mu.Unlock()
}

// RecordSliceDone records that sl's trigger ran to the end (the scheduler's completion hook),
// so passes never scan it. A failure is logged: the slice is then scanned once, which costs
// a little and loses nothing.
func (c *Compensator) RecordSliceDone(ctx context.Context, sl index.Slice) {
	err := c.store.MarkSliceDone(ctx, dao.SliceDone{
		SliceStartMS: sl.Start.UnixMilli(),
		Bucket:       sl.Bucket,
		CompletedMS:  c.clk.Now().UnixMilli(),
		Instance:     c.cfg.InstanceID,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		c.log.Warn("record slice done; it will be scanned by compensation", "slice", sl.String(), "err", err)
		c.m.storeErrors.Inc()
	}
}

// Status reports the loop's state.
func (c *Compensator) Status() Status {
	now := c.clk.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{
		InstanceID:   c.cfg.InstanceID,
		StartedAt:    c.startedAt,
		LastTakeover: c.lastTakeover,
		Interval:     c.interval,
		NextPassAt:   c.nextPassAt,
		Passes:       c.passes,
	}
	if !c.startedAt.IsZero() {
		st.Uptime = now.Sub(c.startedAt)
	}
	if c.lastPass != nil {
		r := *c.lastPass
		st.LastPass = &r
	}
	return st
}

// RunNow runs a pass at once, whatever the timing rules (the admin API), and returns it.
func (c *Compensator) RunNow(ctx context.Context) (Report, error) {
	return c.run(ctx, c.clk.Now(), KindManual)
}

// RunOnce runs a scheduled pass at now (the loop's body, and what tests call).
func (c *Compensator) RunOnce(ctx context.Context, now time.Time) (Report, error) {
	return c.run(ctx, now, KindScheduled)
}

// CatchUp runs the start-up pass at now: a normal pass that also records as missed the
// occurrences of slices older than the catch-up window left undone since the last
// completed slice.
func (c *Compensator) CatchUp(ctx context.Context, now time.Time) (Report, error) {
	return c.run(ctx, now, KindCatchUp)
}

// due is when the next scheduled pass may start (seed 000's three conditions).
func (c *Compensator) due() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.startedAt.Add(c.cfg.Grace)
	if !c.lastTakeover.IsZero() {
		if t := c.lastTakeover.Add(c.cfg.Quiet); t.After(next) {
			next = t
		}
	}
	if c.lastPass != nil && c.lastPass.Kind != KindCatchUp {
		if t := c.lastPass.At.Add(c.interval); t.After(next) {
			next = t
		}
	}
	c.nextPassAt = next
	return next
}

func (c *Compensator) loop(ctx context.Context) {
	defer close(c.done)
	var timer clockwork.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	wait := func(until time.Time) bool {
		d := until.Sub(c.clk.Now())
		if d <= 0 {
			return ctx.Err() == nil
		}
		if timer == nil {
			timer = c.clk.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.Chan():
			return true
		}
	}

	// Catch-up once the slices this instance's scheduler cannot reach (all but the current
	// and previous minute's) are settled: at most half a minute after start (a slice two
	// minutes back settles 2.5T after its start).
	c.mu.Lock()
	start := c.startedAt
	c.mu.Unlock()
	catchUpAt := index.SliceStart(start).Add(settle - 2*index.SliceLen)
	if catchUpAt.Before(start) {
		catchUpAt = start
	}
	if !wait(catchUpAt) {
		return
	}
	if _, err := c.CatchUp(ctx, c.clk.Now()); err != nil && ctx.Err() == nil {
		c.log.Warn("start-up catch-up failed; scheduled passes will retry", "err", err)
	}

	for {
		if !wait(c.due()) {
			return
		}
		now := c.clk.Now()
		if now.Before(c.due()) {
			continue // a takeover or a manual pass moved the due time while we waited
		}
		if _, err := c.RunOnce(ctx, now); err != nil && ctx.Err() == nil {
			c.log.Warn("compensation pass failed", "err", err)
		}
	}
}

func (c *Compensator) run(ctx context.Context, now time.Time, kind string) (Report, error) {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	rep := Report{Kind: kind, At: now}
	begin := c.clk.Now()
	err := c.pass(ctx, now, &rep)
	c.m.pass(kind, err)
	rep.Duration = c.clk.Since(begin)
	if err != nil {
		rep.Err = err.Error()
	}
	c.mu.Lock()
	c.passes++
	c.lastPass = &rep
	// Seed 000: fast while passes find work (or fail), slow once one finds none.
	if rep.Found() > 0 || err != nil {
		c.interval = c.cfg.FastInterval
	} else {
		c.interval = c.cfg.SlowInterval
	}
	interval := c.interval
	c.mu.Unlock()
	level := slog.LevelDebug
	if rep.Found() > 0 || err != nil {
		level = slog.LevelInfo
	}
	c.log.Log(ctx, level, "compensation pass", "kind", kind, "stuck", rep.Stuck, "missing", rep.Missing,
		"redriven", rep.Redriven, "missed", rep.Missed, "slices_scanned", rep.SlicesScanned,
		"deferred", rep.Deferred, "duration_ms", rep.Duration.Milliseconds(), "next_interval", interval.String(), "err", err)
	if err != nil {
		return rep, fmt.Errorf("compensator: %s pass: %w", kind, err)
	}
	return rep, nil
}
