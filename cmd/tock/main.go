// Command tock runs the tock timer service.
//
//	tock serve   [--config tock.yaml]   API and engine in one process
//	tock migrate [--config tock.yaml]   apply the schema migrations and exit
//	tock healthcheck [--url URL]        exit 0 when the instance answers /readyz with 200
//	tock bench [flags] WORKLOAD         run a benchmark workload end to end (steady|burst|ramp|mixed)
//	tock version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/app"
	"github.com/tockd/tock/conf"
)

const usage = `tock: a precise, distributed timer service

Usage:
  tock serve   [--config FILE]   run the API and the engine (SIGINT/SIGTERM stop it gracefully)
  tock migrate [--config FILE]   apply the schema migrations and exit
  tock healthcheck [--url URL]   exit 0 if URL (default http://127.0.0.1:8080/readyz) answers 200
  tock bench [flags] WORKLOAD    benchmark: steady | burst | ramp | mixed (tock bench -h for flags)
  tock version                   print the version

With no configuration tock runs self-contained: SQLite in ./tock-data and an in-process Redis.
Configuration: conf/tock.example.yaml; every key has a TOCK_* environment override.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "tock %s\n", app.Version)
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	case "healthcheck":
		return healthcheck(rest, stderr)
	case "bench":
		return benchCmd(rest, stdout, stderr)
	case "serve", "migrate":
	default:
		fmt.Fprintf(stderr, "tock: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration file (optional)")
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	cfg, err := conf.Load(*configPath, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "tock: %v\n", err)
		return 2
	}
	log := newLogger(cfg.Log, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cmd == "migrate" {
		store, err := app.OpenStore(ctx, cfg)
		if err != nil {
			log.Error("migrate failed", "err", err)
			return 1
		}
		_ = store.Close()
		log.Info("schema is up to date", "store", store.Dialect())
		return 0
	}
	return serve(ctx, cfg, log, stdout)
}

func serve(ctx context.Context, cfg conf.Config, log *slog.Logger, stdout io.Writer) int {
	a, err := app.New(ctx, cfg, log, clockwork.NewRealClock())
	if err != nil {
		log.Error("start failed", "err", err)
		return 1
	}
	if err := a.Start(ctx); err != nil {
		log.Error("start failed", "err", err)
		a.Stop()
		return 1
	}
	printBanner(stdout, cfg, a.Addr())
	select {
	case <-ctx.Done():
		log.Info("signal received, stopping")
	case err := <-a.Served():
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Error("http server failed", "err", err)
			a.Stop()
			return 1
		}
	}
	a.Stop()
	return 0
}

func printBanner(w io.Writer, cfg conf.Config, addr string) {
	fmt.Fprintf(w, "tock %s listening on http://%s (instance %s)\n", app.Version, addr, cfg.InstanceID)
	sqlite, redis := cfg.Embedded()
	if sqlite {
		fmt.Fprintf(w, "  store: embedded SQLite at %s\n", cfg.SQLitePath())
	} else {
		fmt.Fprintln(w, "  store: MySQL (mysql.dsn)")
	}
	if redis {
		fmt.Fprintln(w, "  index: embedded in-process Redis (rebuilt from the store at every start)")
	} else {
		fmt.Fprintf(w, "  index: Redis at %v\n", cfg.Redis.Addr)
	}
	if sqlite || redis {
		fmt.Fprintln(w, "  to run on MySQL and Redis: TOCK_MYSQL_DSN='user:pass@tcp(host:3306)/tock' TOCK_REDIS_ADDR=host:6379 tock serve")
	}
}

func newLogger(c conf.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// healthcheck exists because the container image has no shell or curl.
func healthcheck(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8080/readyz", "readiness URL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(*url)
	if err != nil {
		fmt.Fprintf(stderr, "tock: healthcheck: %v\n", err)
		return 1
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "tock: healthcheck: %s answered %d\n", *url, resp.StatusCode)
		return 1
	}
	return 0
}
