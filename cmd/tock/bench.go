package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/tockd/tock/bench"
)

const benchUsage = `Usage: tock bench [flags] WORKLOAD

Runs a workload end to end against tock and reports lateness, missed, early and duplicate
deliveries, creation rate, CPU and memory, and MySQL/Redis operations per fire.
WORKLOAD is steady | burst | ramp | mixed. Exit status 1 when any occurrence arrived early or
never arrived (or the run failed), 2 on bad usage.

Target: a tock started in this process (default: SQLite in a temp dir and in-process Redis;
with --mysql-dsn / --redis-addr it runs on those), or running instances with --url (repeat it
for several nodes; timers are created round-robin).

Flags:
`

// urlList is a repeatable --url flag.
type urlList []string

func (u *urlList) String() string { return strings.Join(*u, ",") }

func (u *urlList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*u = append(*u, s)
		}
	}
	return nil
}

func benchCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var (
		o       bench.Options
		urls    urlList
		jsonOut = fs.String("json", "", "write the report as JSON to this file (- for stdout)")
		outDir  = fs.String("out-dir", "", "also write the JSON report into this directory as <workload>-<target>-<date>.json (e.g. test/bench/results)")
		level   = fs.String("log-level", "info", "progress log level on stderr: debug, info, warn, error")
		cpuProf = fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (in-process tock included): go tool pprof")
	)
	fs.Var(&urls, "url", "tock instance to test, http://host:port (repeatable); none: start one in this process")
	fs.StringVar(&o.MySQLDSN, "mysql-dsn", "", "MySQL DSN: read SHOW GLOBAL STATUS; embedded: also the in-process tock's store")
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "Redis host:port: read INFO stats; embedded: also the in-process tock's index")
	fs.StringVar(&o.RedisPrefix, "redis-prefix", "", "embedded on Redis: key prefix (default tockbench:<random>:, removed at the end)")
	fs.IntVar(&o.PoolSize, "pool-size", 0, "embedded: engine.pool_size (0: tock's default 256)")
	fs.IntVar(&o.Buckets, "buckets", 0, "embedded: engine.buckets (0: tock's default 8)")
	fs.DurationVar(&o.MigrateStep, "migrate-step", time.Minute, "embedded: engine.migrate_step")
	fs.DurationVar(&o.MigrateWindow, "migrate-window", 2*time.Minute, "embedded: engine.migrate_window")
	fs.StringVar(&o.DataDir, "data-dir", "", "embedded: data dir (default a temp dir, removed)")
	fs.IntVar(&o.Concurrency, "concurrency", 32, "concurrent API clients (keep-alive) per target URL")
	fs.IntVar(&o.Timers, "timers", 0, "timers: steady and burst 1000, mixed 200")
	fs.DurationVar(&o.Period, "period", time.Second, "steady and ramp: the timers' every")
	fs.DurationVar(&o.Duration, "duration", 60*time.Second, "steady and mixed: measurement window")
	fs.DurationVar(&o.Grace, "grace", 5*time.Second, "wait after a window for late arrivals")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Second, "from the end of creation to the window start")
	fs.DurationVar(&o.BurstLead, "burst-lead", 0, "burst: due time after the start of creation (0: calibrated)")
	fs.Float64Var(&o.RampStart, "ramp-start", 100, "ramp: first step's fires/s")
	fs.Float64Var(&o.RampFactor, "ramp-factor", 2, "ramp: rate multiplier per step")
	fs.DurationVar(&o.RampStep, "ramp-step", 10*time.Second, "ramp: measurement window per step")
	fs.Float64Var(&o.RampMax, "ramp-max", 20000, "ramp: highest rate tried (fires/s)")
	fs.DurationVar(&o.P99Bound, "p99-bound", 100*time.Millisecond, "ramp: a step passes while its p99 lateness is at most this")
	fs.Float64Var(&o.FailShare, "fail-share", 0.10, "mixed: share of timers whose callback answers 500 first")
	fs.IntVar(&o.FailAttempts, "fail-attempts", 1, "mixed: attempts answered 500 before 200 (retry max_attempts is this + 1)")
	fs.DurationVar(&o.MaxRuntime, "max-runtime", 15*time.Minute, "hard cap on the workload (cleanup excluded)")
	fs.StringVar(&o.App, "app", "", "the timers' app (default bench-<random>); cleanup deletes this app's timers")
	fs.StringVar(&o.ReceiverAddr, "receiver-addr", "127.0.0.1:0", "callback receiver listen address")
	fs.StringVar(&o.CallbackBase, "callback-base", "", "callback URL base when tock must reach the receiver by another address")
	fs.BoolVar(&o.NoCleanup, "no-cleanup", false, "leave the timers in place")

	if err := fs.Parse(args); err != nil {
		return 2
	}
	// Flags may also follow the workload: tock bench steady --timers 10.
	if fs.NArg() >= 1 {
		o.Workload = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
	}
	if o.Workload == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	o.URLs = urls

	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "tock bench: --log-level %q: %v\n", *level, err)
		return 2
	}
	o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal ends the workload and cleanup still runs; a second one kills.
	go func() {
		<-ctx.Done()
		stop()
	}()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "tock bench: --cpuprofile: %v\n", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	rep, err := bench.Run(ctx, o)
	if rep == nil {
		printBenchErr(stderr, err)
		if errors.Is(err, bench.ErrUsage) {
			return 2
		}
		return 1
	}
	if werr := rep.WriteTable(stdout); werr != nil {
		fmt.Fprintf(stderr, "tock bench: %v\n", werr)
	}
	if *jsonOut == "-" {
		if werr := rep.WriteJSON(stdout); werr != nil {
			fmt.Fprintf(stderr, "tock bench: %v\n", werr)
			return 1
		}
	} else if *jsonOut != "" {
		if werr := rep.SaveJSON(*jsonOut); werr != nil {
			fmt.Fprintf(stderr, "tock bench: %v\n", werr)
			return 1
		}
		fmt.Fprintf(stderr, "report written to %s\n", *jsonOut)
	}
	if *outDir != "" {
		path, werr := rep.SaveIn(*outDir)
		if werr != nil {
			fmt.Fprintf(stderr, "tock bench: %v\n", werr)
			return 1
		}
		fmt.Fprintf(stderr, "report written to %s\n", path)
	}
	if err != nil {
		printBenchErr(stderr, err)
		return 1
	}
	if !rep.Pass {
		return 1
	}
	return 0
}

// printBenchErr prints err once prefixed "tock bench:" (the package's errors start "bench:").
func printBenchErr(w io.Writer, err error) {
	msg := err.Error()
	if !strings.HasPrefix(msg, "bench:") {
		msg = "bench: " + msg
	}
	fmt.Fprintf(w, "tock %s\n", msg)
}
