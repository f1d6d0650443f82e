package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/compensator"
	"github.com/tockd/tock/conf"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/migrator"
	"github.com/tockd/tock/scheduler"
)

// engineStore is what the engine's parts need from dao.Store.
type engineStore interface {
	executor.Store
	executor.PollerStore
	migrator.Store
	compensator.Store
}

// Engine fires timers: the migrator stamps occurrences into the index, the scheduler takes
// slices and runs a trigger per slice, triggers hand due occurrences to the executor.
type Engine struct {
	cfg   conf.Config
	log   *slog.Logger
	idx   *index.Index
	exec  *executor.Executor
	mig   *migrator.Migrator
	sched *scheduler.Scheduler
	comp  *compensator.Compensator // nil with engine.disabled
	// poll claims due retries and takes over stale executions; nil with engine.disabled.
	poll *executor.Poller

	mu      sync.Mutex
	started bool
	stopped bool
}

// NewEngine builds the engine over store and rdb; nothing runs until Start. With
// engine.disabled the engine fires nothing, but TimerChanged still stamps the index and the
// migrator still runs, so an API-only instance keeps the index up to date for the others.
func NewEngine(cfg conf.Config, store *dao.Store, rdb redis.UniversalClient, clk clockwork.Clock, log *slog.Logger, opts ...EngineOption) (*Engine, error) {
	if store == nil {
		return nil, errors.New("app: engine needs a store")
	}
	return newEngine(cfg, store, rdb, clk, log, opts...)
}

// EngineOption sets what NewEngine takes beyond the configuration.
type EngineOption func(*engineOptions)

type engineOptions struct {
	metrics prometheus.Registerer
}

// WithMetrics registers the engine's metrics on r (the app's /metrics registry). Without it
// they go to a private registry nobody reads.
func WithMetrics(r prometheus.Registerer) EngineOption {
	return func(o *engineOptions) { o.metrics = r }
}

func newEngine(cfg conf.Config, store engineStore, rdb redis.UniversalClient, clk clockwork.Clock, log *slog.Logger, opts ...EngineOption) (*Engine, error) {
	var o engineOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.metrics == nil {
		// One registry for all the parts, so they share their common series as in the app.
		o.metrics = prometheus.NewRegistry()
	}
	if rdb == nil {
		return nil, errors.New("app: engine needs a redis client")
	}
	if clk == nil {
		clk = clockwork.NewRealClock()
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("instance", cfg.InstanceID)
	e := &Engine{cfg: cfg, log: log}
	e.idx = index.New(rdb, index.NewKeys(cfg.Redis.KeyPrefix, cfg.Engine.Buckets))
	var err error
	e.mig, err = migrator.New(migrator.Config{
		Step:       cfg.Engine.MigrateStep.D(),
		Window:     cfg.Engine.MigrateWindow.D(),
		Clock:      clk,
		Logger:     log,
		Registerer: o.metrics,
	}, store, e.idx)
	if err != nil {
		return nil, fmt.Errorf("app: engine: %w", err)
	}
	if cfg.Engine.Disabled {
		return e, nil
	}
	e.exec, err = executor.New(executor.Config{
		InstanceID:           cfg.InstanceID,
		PoolSize:             cfg.Engine.PoolSize,
		ResponseExcerptBytes: cfg.Engine.ResponseExcerptBytes,
		StopTimeout:          cfg.HTTP.ShutdownTimeout.D(),
		HeartbeatInterval:    cfg.Engine.HeartbeatInterval.D(),
		ResultWriteTimeout:   cfg.Engine.ResultWriteTimeout.D(),
		ClaimAhead:           cfg.Engine.ClaimAhead.D(),
		Clock:                clk,
		Logger:               log,
		Registerer:           o.metrics,
	}, store)
	if err != nil {
		return nil, fmt.Errorf("app: engine: %w", err)
	}
	cc := cfg.Compensation
	e.comp, err = compensator.New(compensator.Config{
		InstanceID: cfg.InstanceID, Grace: cc.Grace.D(), Quiet: cc.Quiet.D(),
		FastInterval: cc.FastInterval.D(), SlowInterval: cc.SlowInterval.D(), StuckAfter: cc.StuckAfter.D(),
		CatchUpWindow: cc.CatchUpWindow.D(), Rate: cc.Rate, MaxPerPass: cc.MaxPerPass, Clock: clk, Logger: log,
		Registerer: o.metrics,
	}, compensator.Deps{Store: store, Executor: e.exec, Keys: e.idx.Keys()})
	if err != nil {
		e.exec.Stop()
		return nil, fmt.Errorf("app: engine: %w", err)
	}
	e.poll, err = executor.NewPoller(executor.PollerConfig{
		InstanceID: cfg.InstanceID, Interval: cfg.Engine.RetryPoll.D(), HeartbeatInterval: cfg.Engine.HeartbeatInterval.D(),
		MissedBeats: cfg.Engine.MissedHeartbeats, OnTakeover: e.comp.NoteTakeover, Clock: clk, Logger: log,
		Registerer: o.metrics,
	}, store, e.exec)
	if err != nil {
		e.exec.Stop()
		return nil, fmt.Errorf("app: engine: %w", err)
	}
	e.sched, err = scheduler.New(scheduler.Config{Buckets: cfg.Engine.Buckets, Clock: clk, Logger: log,
		LeaseTTL: cfg.Engine.SliceLeaseTTL.D(), LeaseRenew: cfg.Engine.SliceLeaseRenew.D(), Lead: cfg.Engine.ClaimAhead.D(),
		OnSliceDone: e.comp.RecordSliceDone, Registerer: o.metrics}, e.idx, e.exec)
	if err != nil {
		e.exec.Stop()
		return nil, fmt.Errorf("app: engine: %w", err)
	}
	return e, nil
}

// Start starts the migrator, then the scheduler; it returns at once. The engine runs until
// Stop, whatever becomes of ctx.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.stopped {
		return errors.New("app: engine already started")
	}
	e.started = true
	if err := e.mig.Start(ctx); err != nil {
		return fmt.Errorf("app: start migrator: %w", err)
	}
	if e.sched != nil {
		// Heartbeats first: they renew the leases of everything the others start.
		if err := e.exec.Start(ctx); err != nil {
			e.mig.Stop()
			return fmt.Errorf("app: start executor: %w", err)
		}
		if err := e.sched.Start(ctx); err != nil {
			e.mig.Stop()
			return fmt.Errorf("app: start scheduler: %w", err)
		}
		if err := e.poll.Start(ctx); err != nil {
			e.sched.Stop()
			e.mig.Stop()
			return fmt.Errorf("app: start retry poller: %w", err)
		}
		// The compensator's grace period counts from here; its catch-up runs within 30 s.
		if err := e.comp.Start(ctx); err != nil {
			e.sched.Stop()
			e.mig.Stop()
			return fmt.Errorf("app: start compensator: %w", err)
		}
	}
	e.log.Info("engine started", "buckets", e.cfg.Engine.Buckets, "pool_size", e.cfg.Engine.PoolSize,
		"fires_timers", e.sched != nil)
	return nil
}

// Stop stops producers before consumers: the scheduler and its triggers (releasing the
// locks of slices not completed), the migrator, then the executor, which lets callbacks in
// flight finish within http.shutdown_timeout. It blocks until all are gone; idempotent.
func (e *Engine) Stop() {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	e.stopped = true
	e.mu.Unlock()
	if e.comp != nil {
		e.comp.Stop() // a producer too: before the executor
	}
	if e.sched != nil {
		e.sched.Stop()
	}
	if e.poll != nil {
		e.poll.Stop() // a producer too; what it claimed runs or is handed back in exec.Stop
	}
	e.mig.Stop()
	if e.exec != nil {
		// Lets callbacks in flight finish within http.shutdown_timeout (renewing their
		// leases), hands back the ones cut short, then stops the heartbeats.
		e.exec.Stop()
	}
}

// Compensator is the engine's compensation loop, nil when the engine fires nothing
// (engine.disabled). The admin API serves it; the takeover calls its NoteTakeover.
func (e *Engine) Compensator() *compensator.Compensator { return e.comp }

// TimerChanged stamps (or unstamps) a timer's upcoming occurrences after the API changed
// it: before is nil on create, after.Status is "deleted" on delete.
func (e *Engine) TimerChanged(ctx context.Context, before *dao.Timer, after dao.Timer) error {
	return e.mig.TimerChanged(ctx, before, after)
}
