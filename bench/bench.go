// Package bench runs a workload end to end against tock and reports it: timers are created
// through the public REST API, a local HTTP receiver records every callback, and the
// deliveries are matched against the occurrences each timer's schedule has in a measurement
// window (exactly, from the schedule), giving lateness percentiles, missed, early and
// duplicate deliveries, plus the target's CPU, memory and MySQL/Redis operations per fire.
//
// The target is a tock started in this process (embedded stores, or MySQL and Redis), or one
// or more running instances given by URL. Every workload stops by itself; the timers it
// created are deleted at the end.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strings"
	"time"
)

// Workloads.
const (
	Steady = "steady"
	Burst  = "burst"
	Ramp   = "ramp"
	Mixed  = "mixed"
)

// ErrUsage marks an invalid Options value.
var ErrUsage = errors.New("bench: invalid options")

// Options configure a run. Zero values take the defaults of withDefaults.
type Options struct {
	Workload string

	// URLs of running tock instances; timers are created round-robin across them. Empty:
	// start a tock in this process.
	URLs []string
	// MySQLDSN and RedisAddr are read for SHOW GLOBAL STATUS and INFO stats counters; in
	// embedded mode the in-process tock also uses them as its stores.
	MySQLDSN  string
	RedisAddr string
	// Embedded tock only: Redis key prefix (default a random tockbench:<hex>:), executor
	// pool size and buckets (0: tock's defaults), stamping step and window (default 1m and
	// 2m: an every-second timer stamps 180 occurrences instead of 10,800), data dir
	// (default a temp dir, removed).
	RedisPrefix   string
	PoolSize      int
	Buckets       int
	MigrateStep   time.Duration
	MigrateWindow time.Duration
	DataDir       string

	// Concurrency is the number of concurrent API clients per target URL. Default 32.
	Concurrency int
	// Timers: steady (default 1000), burst (1000) and mixed (200).
	Timers int
	// Period of steady's and ramp's every-timers. Default 1s.
	Period time.Duration
	// Duration of the measurement window (steady, mixed). Default 60s.
	Duration time.Duration
	// Grace is how long to wait after a window for late arrivals. Default 5s. In steady,
	// burst and mixed the wait goes on while the window's deliveries still arrive.
	Grace time.Duration
	// Warmup separates the end of creation from the window start. Default 2s.
	Warmup time.Duration
	// BurstLead is how far ahead of the start of creation the burst is due; 0 derives it
	// from a calibration of the creation rate.
	BurstLead time.Duration

	// Ramp: start rate (fires/s, default 100), factor per step (2), step length (10s), max
	// rate (20000) and the p99 lateness bound of a step (100ms).
	RampStart  float64
	RampFactor float64
	RampStep   time.Duration
	RampMax    float64
	P99Bound   time.Duration
	// Mixed: share of timers whose callback fails (0: none; the command's default is 0.10)
	// and how many first attempts fail (default 1).
	FailShare    float64
	FailAttempts int

	// MaxRuntime caps the whole workload (cleanup excluded). Default 15m.
	MaxRuntime time.Duration
	// App names the timers' app; default bench-<random>. Cleanup deletes this app's timers.
	App string
	// ReceiverAddr is where the callback receiver listens (default 127.0.0.1:0);
	// CallbackBase replaces http://<that address> in callback URLs (for remote tock nodes).
	ReceiverAddr string
	CallbackBase string
	NoCleanup    bool

	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Concurrency == 0 {
		o.Concurrency = 32
	}
	if o.Timers == 0 {
		switch o.Workload {
		case Mixed:
			o.Timers = 200
		default:
			o.Timers = 1000
		}
	}
	def(&o.Period, time.Second)
	def(&o.Duration, 60*time.Second)
	if o.Grace == 0 {
		o.Grace = 5 * time.Second
	}
	def(&o.Warmup, 2*time.Second)
	def(&o.MigrateStep, time.Minute)
	def(&o.MigrateWindow, 2*time.Minute)
	if o.RampStart == 0 {
		o.RampStart = 100
	}
	if o.RampFactor == 0 {
		o.RampFactor = 2
	}
	def(&o.RampStep, 10*time.Second)
	if o.RampMax == 0 {
		o.RampMax = 20000
	}
	def(&o.P99Bound, 100*time.Millisecond)
	if o.FailAttempts == 0 {
		o.FailAttempts = 1
	}
	def(&o.MaxRuntime, 15*time.Minute)
	if o.App == "" {
		o.App = "bench-" + randomHex(4)
	}
	if o.ReceiverAddr == "" {
		o.ReceiverAddr = "127.0.0.1:0"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch o.Workload {
	case Steady, Burst, Ramp, Mixed:
	default:
		bad("workload %q: want steady, burst, ramp or mixed", o.Workload)
	}
	for _, u := range o.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("--url %q: want http://host:port", u)
		}
	}
	if o.Concurrency < 1 || o.Concurrency > 1024 {
		bad("--concurrency %d: want 1 to 1024", o.Concurrency)
	}
	if o.Timers < 1 || o.Timers > 1_000_000 {
		bad("--timers %d: want 1 to 1000000", o.Timers)
	}
	if o.Period < time.Second || o.Period%time.Millisecond != 0 {
		bad("--period %s: want at least 1s, whole milliseconds", o.Period)
	}
	if o.Duration < time.Second {
		bad("--duration %s: want at least 1s", o.Duration)
	}
	if o.Grace < 0 || o.Warmup < 0 || o.BurstLead < 0 {
		bad("--grace, --warmup and --burst-lead must not be negative")
	}
	if o.RampStart <= 0 || o.RampFactor <= 1 || o.RampMax < o.RampStart || o.RampStep < time.Second || o.P99Bound <= 0 {
		bad("ramp: want --ramp-start > 0, --ramp-factor > 1, --ramp-max >= --ramp-start, --ramp-step >= 1s, --p99-bound > 0")
	}
	if o.FailShare < 0 || o.FailShare >= 1 {
		bad("--fail-share %g: want 0 to <1", o.FailShare)
	}
	if o.FailAttempts < 1 || o.FailAttempts > 99 {
		bad("--fail-attempts %d: want 1 to 99", o.FailAttempts)
	}
	if o.MaxRuntime <= 0 {
		bad("--max-runtime must be positive")
	}
	if len(o.URLs) > 0 && (o.PoolSize != 0 || o.Buckets != 0 || o.DataDir != "" || o.RedisPrefix != "") {
		bad("--pool-size, --buckets, --data-dir and --redis-prefix apply to the embedded tock only (no --url)")
	}
	return errors.Join(errs...)
}

// Run runs the workload and returns its report. An error means the run could not be
// completed (the report then holds what was measured so far, and may be nil if nothing
// started). A complete run's verdict is Report.Pass.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	started := time.Now()
	recv, err := startReceiver(o.ReceiverAddr, o.CallbackBase)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := recv.close(); err != nil {
			o.Log.Warn("receiver", "err", err)
		}
	}()
	tgt, err := openTarget(ctx, o)
	if err != nil {
		return nil, err
	}
	defer tgt.close() // before the receiver closes: callbacks in flight still land
	api := newAPIClient(tgt.bases, o.Concurrency)
	defer api.close()
	if err := tgt.describe(ctx, api); err != nil {
		return nil, err
	}
	rep := &Report{
		Workload: o.Workload, Params: params(o), Target: tgt.info,
		StartedAt: started.UTC().Format(time.RFC3339Nano), Host: hostInfo(),
	}
	r := &runner{o: o, log: o.Log, recv: recv, tgt: tgt, api: api, rep: rep, byID: map[int64]*planned{},
		hardStop: started.Add(o.MaxRuntime)}
	o.Log.Info("bench starting", "workload", o.Workload, "target", tgt.info.Name(), "urls", strings.Join(tgt.bases, ","),
		"app", o.App, "receiver", recv.base)

	wctx, cancel := context.WithDeadline(ctx, r.hardStop)
	switch o.Workload {
	case Steady:
		err = r.steady(wctx)
	case Burst:
		err = r.burst(wctx)
	case Ramp:
		err = r.ramp(wctx)
	case Mixed:
		err = r.mixed(wctx)
	}
	cancel()
	ds := recv.all()
	rep.EarlyAnywhere = earlyAnywhere(r.byID, ds)
	rep.BadHeaders = badHeaders(ds)

	if !o.NoCleanup && len(r.ids) > 0 {
		// Not ctx alone: an interrupted run still removes its timers from a shared target.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		t0 := time.Now()
		o.Log.Info("cleanup: deleting the run's timers", "app", o.App, "timers", len(r.ids))
		method, cerr := api.deleteApp(cctx, o.App, r.ids)
		rep.CleanupMethod, rep.CleanupSeconds = method, round3(time.Since(t0).Seconds())
		if cerr != nil {
			rep.CleanupError = cerr.Error()
			o.Log.Warn("cleanup incomplete", "app", o.App, "err", cerr)
		}
		ccancel()
	}
	rep.FinishedAt = time.Now().UTC().Format(time.RFC3339Nano)
	rep.Host.LoadAvgEnd = loadAvg()
	if tgt.info.Mode == "url" {
		rep.Notes = append(rep.Notes, "lateness compares this host's clock with the target's scheduled times: a clock offset between the hosts adds to it")
	}
	rep.Pass = err == nil && rep.EarlyAnywhere == 0 && rep.Early == 0 && rep.Missed == 0 && rep.Expected > 0
	if err != nil {
		rep.Notes = append(rep.Notes, "run did not complete: "+err.Error())
	}
	return rep, err
}

func params(o Options) map[string]any {
	p := map[string]any{"concurrency": o.Concurrency, "grace": o.Grace.String(), "warmup": o.Warmup.String(),
		"max_runtime": o.MaxRuntime.String(), "app": o.App}
	switch o.Workload {
	case Steady:
		p["timers"], p["period"], p["duration"] = o.Timers, o.Period.String(), o.Duration.String()
	case Burst:
		p["timers"] = o.Timers
		if o.BurstLead > 0 {
			p["burst_lead"] = o.BurstLead.String()
		}
	case Ramp:
		p["ramp_start"], p["ramp_factor"], p["ramp_step"] = o.RampStart, o.RampFactor, o.RampStep.String()
		p["ramp_max"], p["p99_bound"], p["period"] = o.RampMax, o.P99Bound.String(), o.Period.String()
	case Mixed:
		p["timers"], p["duration"], p["fail_share"], p["fail_attempts"] = o.Timers, o.Duration.String(), o.FailShare, o.FailAttempts
	}
	return p
}

func hostInfo() HostInfo {
	h := HostInfo{CPUs: runtime.NumCPU(), GoOS: runtime.GOOS, GoArch: runtime.GOARCH}
	h.Hostname, _ = os.Hostname()
	h.LoadAvg = loadAvg()
	return h
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}
