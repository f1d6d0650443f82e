// Package app wires tock together: stores, the hot index, the engine and the REST API, with
// one lifecycle. cmd/tock only parses flags and calls it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/api"
	"github.com/tockd/tock/batch"
	"github.com/tockd/tock/conf"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/index"
)

// Version is set at build time with -ldflags "-X github.com/tockd/tock/app.Version=v1.2.3".
var Version = "dev"

// App is one tock process: API and engine over shared stores.
type App struct {
	cfg      conf.Config
	log      *slog.Logger
	clock    clockwork.Clock
	store    *dao.Store
	rdb      redis.UniversalClient
	embedded *index.Embedded // nil when a real Redis is configured
	engine   *Engine
	batches  *batch.Batch
	server   *http.Server
	listener net.Listener
	metrics  *prometheus.Registry

	stopOnce sync.Once
	served   chan error
}

// OpenStore opens and migrates the configured source-of-truth store.
func OpenStore(ctx context.Context, cfg conf.Config) (*dao.Store, error) {
	opts := dao.Options{MySQLDSN: cfg.MySQL.DSN, MaxOpenConns: cfg.MySQL.MaxOpenConns}
	if cfg.MySQL.DSN == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("app: create data dir %s: %w", cfg.DataDir, err)
		}
		opts.SQLitePath = cfg.SQLitePath()
	}
	store, err := dao.Open(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("app: open store: %w", err)
	}
	if err := store.Migrate(ctx); err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("app: migrate schema: %w", err)
	}
	return store, nil
}

// New opens the stores and builds the engine and API; nothing runs until Start.
func New(ctx context.Context, cfg conf.Config, log *slog.Logger, clk clockwork.Clock) (*App, error) {
	a := &App{cfg: cfg, log: log, clock: clk, served: make(chan error, 1), metrics: newRegistry()}
	var err error
	if a.store, err = OpenStore(ctx, cfg); err != nil {
		return nil, err
	}
	if len(cfg.Redis.Addr) == 0 {
		a.embedded, err = index.NewEmbedded(clk)
		if err != nil {
			a.closeStores()
			return nil, fmt.Errorf("app: start embedded redis: %w", err)
		}
		a.rdb = a.embedded.Client()
	} else {
		a.rdb = index.NewClient(cfg.Redis)
	}
	if err := index.Instrument(a.rdb, a.metrics); err != nil {
		a.closeStores()
		return nil, fmt.Errorf("app: %w", err)
	}
	// The store's connection pool: go_sql_* series labelled db_name=mysql or sqlite.
	if err := a.metrics.Register(collectors.NewDBStatsCollector(a.store.DB().DB, a.store.Dialect())); err != nil {
		a.closeStores()
		return nil, fmt.Errorf("app: register store metrics: %w", err)
	}
	// With engine.disabled the engine still stamps changed timers into the index (it fires
	// nothing), so API-only instances keep the index current for the others.
	a.engine, err = NewEngine(cfg, a.store, a.rdb, clk, log, WithMetrics(a.metrics))
	if err != nil {
		a.closeStores()
		return nil, fmt.Errorf("app: build engine: %w", err)
	}
	a.batches, err = batch.New(batch.Config{
		QueueSize:    cfg.Batch.QueueSize,
		Workers:      cfg.Batch.Workers,
		ScanInterval: cfg.Batch.ScanInterval.D(),
		MaxRetries:   cfg.Batch.MaxRetries,
		MaxTargets:   cfg.Batch.MaxTargets,
	}, batch.Deps{Store: a.store, Clock: clk, Log: log, Instance: cfg.InstanceID, Registerer: a.metrics})
	if err != nil {
		a.closeStores()
		return nil, fmt.Errorf("app: build batches: %w", err)
	}
	// A nil *Compensator inside the interface would not be nil: pass it only when there is one.
	var comp api.Compensation
	if c := a.engine.Compensator(); c != nil {
		comp = c
	}
	storeName := "mysql"
	if cfg.MySQL.DSN == "" {
		storeName = "sqlite"
	}
	handler := api.New(api.Deps{
		Store:        a.store,
		Clock:        clk,
		Engine:       a.engine,
		Batches:      a.batches,
		Compensation: comp,
		Log:          log,
		Version:      Version,
		Checks: []api.Check{
			{Name: storeName, Fn: a.store.Ping},
			{Name: "redis", Fn: func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() }},
		},
	}).Handler()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics, promhttp.HandlerOpts{Registry: a.metrics}))
	mux.Handle("/", handler)
	a.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return a, nil
}

// newRegistry holds every metric of the process: Go runtime, process and build info, plus
// what each component registers on it.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "tock_build_info",
			Help:        "Always 1; the version label says which build runs.",
			ConstLabels: prometheus.Labels{"version": Version},
		}, func() float64 { return 1 }),
	)
	return reg
}

// Metrics is the process's Prometheus registry, served at /metrics.
func (a *App) Metrics() *prometheus.Registry { return a.metrics }

// Start listens on http.addr and starts the engine; it returns once both run.
func (a *App) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("app: listen on %s (http.addr): %w", a.cfg.HTTP.Addr, err)
	}
	a.listener = ln
	go func() {
		err := a.server.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		a.served <- err
	}()
	if err := a.engine.Start(ctx); err != nil {
		return fmt.Errorf("app: start engine: %w", err)
	}
	// Not ctx: a signal must end batches through Stop's graceful path, not like a crash.
	if err := a.batches.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("app: start batches: %w", err)
	}
	a.log.Info("tock started", "addr", ln.Addr().String(), "instance", a.cfg.InstanceID, "version", Version)
	return nil
}

// Addr is the address the API listens on (useful with port 0).
func (a *App) Addr() string { return a.listener.Addr().String() }

// Served reports the HTTP server's end: nil after Stop, an error if it failed by itself.
func (a *App) Served() <-chan error { return a.served }

// Stop stops taking requests and timers, waits for work in flight within
// http.shutdown_timeout, and closes the stores. It is idempotent.
func (a *App) Stop() {
	a.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.HTTP.ShutdownTimeout.D())
		defer cancel()
		if a.server != nil {
			if err := a.server.Shutdown(ctx); err != nil {
				a.log.Warn("http shutdown", "err", err)
			}
		}
		if a.batches != nil {
			a.batches.Stop()
		}
		// Producers (API, scheduler) stop before consumers (executor pool) inside Engine.Stop.
		if a.engine != nil {
			a.engine.Stop()
		}
		a.closeStores()
		a.log.Info("tock stopped", "instance", a.cfg.InstanceID)
	})
}

func (a *App) closeStores() {
	if a.rdb != nil && a.embedded == nil {
		_ = a.rdb.Close()
	}
	if a.embedded != nil {
		a.embedded.Close()
	}
	if a.store != nil {
		_ = a.store.Close()
	}
}
