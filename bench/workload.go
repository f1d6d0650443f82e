package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/tockd/tock/schedule"
)

// runner holds one run's state.
type runner struct {
	o        Options
	log      *slog.Logger
	recv     *receiver
	tgt      *target
	api      *apiClient
	rep      *Report
	hardStop time.Time

	seq  int
	ids  []int64            // every timer created, for cleanup
	byID map[int64]*planned // every timer created, by id
}

// req builds a create request. failN > 0 points the callback at a path that answers 500 to
// the first failN attempts, with a retry policy that then succeeds quickly.
func (r *runner) req(kind string, spec schedule.Spec, failN int) timerRequest {
	r.seq++
	name := fmt.Sprintf("%s-%07d", kind, r.seq)
	t := timerRequest{
		kind: kind, App: r.o.App, Name: name, Schedule: spec, RequestID: name,
		Callback: callbackRequest{URL: r.recv.okURL(), Timeout: "5s"},
	}
	if failN > 0 {
		t.Callback.URL = r.recv.failURL(failN)
		t.Retry = &retryRequest{MaxAttempts: failN + 1, Backoff: "100ms", MaxBackoff: "500ms"}
	}
	return t
}

// create creates the timers and returns them as planned, with the time it took. Timers
// created before an error are kept for cleanup. label only names the phase in logs.
func (r *runner) create(ctx context.Context, label string, reqs []timerRequest) ([]*planned, time.Duration, error) {
	if len(reqs) == 0 {
		return nil, 0, nil
	}
	r.log.Info("creating timers", "kind", label, "n", len(reqs), "concurrency", r.o.Concurrency)
	t0 := time.Now()
	out, err := r.api.createAll(ctx, reqs)
	took := time.Since(t0)
	var ps []*planned
	for i, tr := range out {
		if tr.ID == 0 {
			continue
		}
		r.ids = append(r.ids, tr.ID)
		if e := reqs[i].Enabled; e != nil && !*e {
			continue // never fires: only cleaned up
		}
		p, perr := newPlanned(reqs[i].kind, tr)
		if perr != nil {
			if err == nil {
				err = perr
			}
			continue
		}
		r.byID[p.ID] = p
		ps = append(ps, p)
	}
	if err != nil {
		return ps, took, err
	}
	r.log.Info("timers created", "kind", label, "n", len(ps), "seconds", round3(took.Seconds()),
		"per_s", math.Round(float64(len(ps))/took.Seconds()))
	return ps, took, nil
}

func (r *runner) recordCreation(n int, took time.Duration) {
	r.rep.TimersCreated += n
	r.rep.CreateSeconds = round3(r.rep.CreateSeconds + took.Seconds())
	if r.rep.CreateSeconds > 0 {
		r.rep.CreatedPerSec = math.Round(float64(r.rep.TimersCreated) / r.rep.CreateSeconds)
	}
}

// sleepUntil waits for the receiver clock to reach t.
func (r *runner) sleepUntil(ctx context.Context, t time.Time) error {
	d := t.Sub(r.recv.now())
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("bench: waiting: %w", ctx.Err())
	case <-tm.C:
		return nil
	}
}

func (r *runner) snap(ctx context.Context) snapshot {
	s := r.tgt.snap(ctx, r.api)
	s.At = r.recv.now()
	return s
}

// measurement is one window's outcome.
type measurement struct {
	from, to time.Time
	exp      map[occKey]*planned
	tallies  map[string]*tally
	res      *Resources
}

func (m measurement) total() *tally { return m.tallies[""] }

// measure takes the counters at the window's start, waits out the window and the grace (as
// the watcher decides, see waitAll), and matches the deliveries. With snapAfterDrain the
// closing counters are taken after the wait (burst: the work happens after the due time);
// otherwise at the window's end (steady state).
func (r *runner) measure(ctx context.Context, ts []*planned, from, to time.Time, extend, snapAfterDrain bool) (measurement, error) {
	m := measurement{from: from, to: to, exp: expectedIn(ts, from, to)}
	want := make(map[occKey]struct{}, len(m.exp))
	for k := range m.exp {
		want[k] = struct{}{}
	}
	w := r.recv.watch(want)
	r.log.Info("measuring", "window_start", schedule.FormatTime(from), "window", to.Sub(from), "expected", len(want))
	if err := r.sleepUntil(ctx, from.Add(-200*time.Millisecond)); err != nil {
		return m, err
	}
	before := r.snap(ctx)
	var after snapshot
	if !snapAfterDrain {
		if err := r.sleepUntil(ctx, to); err != nil {
			return m, err
		}
		after = r.snap(ctx)
	}
	all := w.waitAll(ctx, to, r.o.Grace, extend, r.hardStop)
	if snapAfterDrain {
		// The last callbacks' results are written after they answered: let them land so
		// the closing counters include that work.
		_ = r.sleepUntil(ctx, r.recv.now().Add(time.Second))
		after = r.snap(context.WithoutCancel(ctx))
	}
	if !all {
		r.log.Warn("not every expected occurrence arrived", "expected", len(want), "arrived", w.poll())
	}
	ds := r.recv.all()
	fromMS, toMS := from.UnixMilli(), to.UnixMilli()
	m.tallies = analyze(ts, m.exp, r.byID, ds, func(ms int64) bool { return ms >= fromMS && ms < toMS })
	fires := 0
	for _, d := range ds {
		if d.ArrivalNS >= before.At.UnixNano() && d.ArrivalNS <= after.At.UnixNano() {
			fires++
		}
	}
	m.res = resources(before, after, r.tgt.nodes(), fires, r.tgt.info.Mode == "embedded")
	return m, ctx.Err()
}

// fill copies a measurement's totals into the report.
func (r *runner) fill(m measurement) {
	t := m.total()
	r.rep.WindowStart = schedule.FormatTime(m.from)
	r.rep.WindowSeconds = round3(m.to.Sub(m.from).Seconds())
	r.rep.Counts = t.Counts
	r.rep.Lateness = computeStats(t.first)
	r.rep.Resources = m.res
	r.rep.FiresPerSecond = round3(float64(t.Delivered) / m.to.Sub(m.from).Seconds())
}

// windowStart is warmup after now, on a whole millisecond.
func (r *runner) windowStart() time.Time {
	return r.recv.now().Add(r.o.Warmup).Truncate(time.Millisecond)
}

// steady: N every-P timers; the window starts once all exist.
func (r *runner) steady(ctx context.Context) error {
	reqs := make([]timerRequest, r.o.Timers)
	for i := range reqs {
		reqs[i] = r.req("every", schedule.Spec{Every: r.o.Period.String()}, 0)
	}
	ps, took, err := r.create(ctx, "every", reqs)
	r.recordCreation(len(ps), took)
	if err != nil {
		return err
	}
	from := r.windowStart()
	m, err := r.measure(ctx, ps, from, from.Add(r.o.Duration), true, false)
	r.fill(m)
	return err
}

// leadFor estimates how long creating n timers takes at rate per second, with headroom.
func leadFor(n int, rate float64) time.Duration {
	if rate <= 0 {
		rate = 1
	}
	return time.Duration(1.5 * float64(n) / rate * float64(time.Second))
}

// burst: N one-shots all due at the same instant, a whole second after creation ends.
func (r *runner) burst(ctx context.Context) error {
	lead := r.o.BurstLead
	if lead == 0 {
		// Calibrate the creation rate with disabled timers (they never fire), so the due
		// time can be set before creating the burst and still fall after its creation.
		k := min(200, max(20, r.o.Timers/10))
		off := false
		reqs := make([]timerRequest, k)
		for i := range reqs {
			reqs[i] = r.req("calibration", schedule.Spec{Every: "1h"}, 0)
			reqs[i].Enabled = &off
		}
		_, took, err := r.create(ctx, "calibration", reqs)
		if err != nil {
			return err
		}
		lead = r.o.Warmup + time.Second + leadFor(r.o.Timers, float64(len(reqs))/took.Seconds())
	}
	due := r.recv.now().Add(lead).Truncate(time.Second).Add(time.Second)
	reqs := make([]timerRequest, r.o.Timers)
	for i := range reqs {
		reqs[i] = r.req("oneshot", schedule.Spec{At: schedule.FormatTime(due)}, 0)
	}
	ps, took, err := r.create(ctx, "oneshot", reqs)
	r.recordCreation(len(ps), took)
	if err != nil {
		return err
	}
	margin := due.Sub(r.recv.now())
	if margin < 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("creation ended %s after the due time: lateness includes that overrun (raise --burst-lead)", -margin))
	}
	m, err := r.measure(ctx, ps, due, due.Add(time.Second), true, true)
	r.fill(m)
	t := m.total()
	b := &BurstResult{DueAt: schedule.FormatTime(due), CreationMarginMS: round3(float64(margin) / 1e6)}
	dueNS := due.UnixNano()
	if t.firstNS != 0 {
		b.FirstArrivalMS = round3(float64(t.firstNS-dueNS) / 1e6)
	}
	if t.lastOKNS != 0 {
		b.LastArrivalMS = round3(float64(t.lastOKNS-dueNS) / 1e6)
		if span := float64(t.lastOKNS-dueNS) / 1e9; span > 0 {
			b.DrainFiresPerSec = math.Round(float64(t.Delivered) / span)
		}
	}
	r.rep.Burst = b
	// The burst's rate is how fast it drained, not delivered over the 1 s window.
	r.rep.FiresPerSecond = b.DrainFiresPerSec
	return err
}

// ramp raises the fire rate step by step (more every-P timers), measuring each step's own
// window, until a step's p99 lateness exceeds the bound, a step's occurrences are still
// missing a grace after its window (a backlog), the max rate is reached or time runs out.
func (r *runner) ramp(ctx context.Context) error {
	var (
		all      []*planned
		steps    []measurement
		stepErr  error
		rate     = r.o.RampStart
		perTimer = 1 / r.o.Period.Seconds() // fires per second of one timer
	)
	for step := 1; ; step++ {
		need := int(math.Ceil(rate / perTimer))
		reqs := make([]timerRequest, max(0, need-len(all)))
		for i := range reqs {
			reqs[i] = r.req("every", schedule.Spec{Every: r.o.Period.String()}, 0)
		}
		ps, took, err := r.create(ctx, "every", reqs)
		r.recordCreation(len(ps), took)
		all = append(all, ps...)
		if err != nil {
			stepErr = err
			r.rep.StopReason = "creation failed"
			break
		}
		from := r.windowStart()
		m, err := r.measure(ctx, all, from, from.Add(r.o.RampStep), false, false)
		if err != nil {
			stepErr = err
			r.rep.StopReason = "max runtime reached or interrupted"
			break
		}
		steps = append(steps, m)
		t := m.total()
		row := StepResult{
			Step: step, TargetRate: rate, Timers: len(all), Created: len(ps), WindowStart: schedule.FormatTime(from),
			WindowSecs: r.o.RampStep.Seconds(), FiresPerSec: round3(float64(t.Delivered) / r.o.RampStep.Seconds()),
			Counts: t.Counts, Lateness: computeStats(append([]float64(nil), t.first...)), Resources: m.res,
		}
		if took > 0 {
			row.CreateRate = math.Round(float64(len(ps)) / took.Seconds())
		}
		p99 := time.Duration(row.Lateness.P99 * float64(time.Millisecond))
		switch {
		case t.Early > 0:
			row.Verdict = fmt.Sprintf("early arrivals (%d)", t.Early)
		case t.Missed > 0:
			row.Verdict = fmt.Sprintf("backlog: %d not arrived %s after the window", t.Missed, r.o.Grace)
		case p99 > r.o.P99Bound:
			row.Verdict = fmt.Sprintf("p99 %s > %s", p99.Round(time.Millisecond), r.o.P99Bound)
		default:
			row.Passed, row.Verdict = true, "ok"
			r.rep.MaxSustainedRate = rate
		}
		r.rep.Steps = append(r.rep.Steps, row)
		r.log.Info("ramp step", "step", step, "rate", rate, "timers", len(all), "p99_ms", row.Lateness.P99,
			"missed", t.Missed, "verdict", row.Verdict)
		if !row.Passed {
			r.rep.StopReason = "step " + fmt.Sprint(step) + ": " + row.Verdict
			break
		}
		if rate >= r.o.RampMax {
			r.rep.StopReason = "reached --ramp-max"
			break
		}
		// The next step needs its creation, warmup, window and grace before the hard stop.
		next := math.Min(rate*r.o.RampFactor, r.o.RampMax)
		estimate := leadFor(int(math.Ceil(next/perTimer))-len(all), r.rep.CreatedPerSec) + r.o.Warmup + r.o.RampStep + r.o.Grace
		if r.recv.now().Add(estimate).After(r.hardStop) {
			r.rep.StopReason = "--max-runtime leaves no time for the next step"
			break
		}
		rate = next
	}
	if len(steps) == 0 {
		return stepErr
	}
	// The overall counts: every step's window again, after the backlog had time to drain,
	// so "missed" means never arrived (a step's verdict used its own grace).
	exp := map[occKey]*planned{}
	want := map[occKey]struct{}{}
	for _, m := range steps {
		for k, p := range m.exp {
			exp[k], want[k] = p, struct{}{}
		}
	}
	last := steps[len(steps)-1]
	if stepErr == nil {
		r.recv.watch(want).waitAll(ctx, last.to, r.o.Grace, true, r.hardStop)
	}
	inWindow := func(ms int64) bool {
		for _, m := range steps {
			if ms >= m.from.UnixMilli() && ms < m.to.UnixMilli() {
				return true
			}
		}
		return false
	}
	t := analyze(all, exp, r.byID, r.recv.all(), inWindow)[""]
	r.rep.Counts = t.Counts
	r.rep.Lateness = computeStats(t.first)
	r.rep.WindowStart = schedule.FormatTime(steps[0].from)
	r.rep.WindowSeconds = round3(float64(len(steps)) * r.o.RampStep.Seconds())
	r.rep.FiresPerSecond = r.rep.MaxSustainedRate
	return stepErr
}

// Mixed composition.
var (
	mixedEvery   = []string{"1s", "2s", "5s", "3s"}
	mixedCron    = []string{"* * * * * *", "*/2 * * * * *", "*/5 * * * * *", "*/3 * * * * *"}
	mixedMinute  = []string{"* * * * *", "15 * * * * *", "30 */1 * * * *", "45 * * * * *"}
	mixedZones   = []string{"Europe/Berlin", "America/New_York", "Asia/Tokyo", "Asia/Kathmandu", "Australia/Adelaide", "UTC"}
	mixedRetryEv = "2s"
)

// mixed: every-timers, second-level crons and minute crons across time zones, one-shots
// spread over the window, and a share of timers whose callback fails its first attempts.
func (r *runner) mixed(ctx context.Context) error {
	nFail := int(math.Round(float64(r.o.Timers) * r.o.FailShare))
	rest := r.o.Timers - nFail
	var periodic []timerRequest
	nOneShot := 0
	for j := 0; j < rest; j++ {
		switch j % 10 {
		case 0, 1, 2:
			periodic = append(periodic, r.req("every", schedule.Spec{Every: mixedEvery[j/10%len(mixedEvery)]}, 0))
		case 3, 4, 5:
			spec := schedule.Spec{Cron: mixedCron[j/10%len(mixedCron)], Timezone: mixedZones[j%len(mixedZones)]}
			periodic = append(periodic, r.req("cron", spec, 0))
		case 6:
			spec := schedule.Spec{Cron: mixedMinute[j/10%len(mixedMinute)], Timezone: mixedZones[j/10%len(mixedZones)]}
			periodic = append(periodic, r.req("cron-minute", spec, 0))
		default:
			nOneShot++
		}
	}
	for j := 0; j < nFail; j++ {
		periodic = append(periodic, r.req("retry", schedule.Spec{Every: mixedRetryEv}, r.o.FailAttempts))
	}
	ps, took, err := r.create(ctx, "periodic", periodic)
	r.recordCreation(len(ps), took)
	if err != nil {
		return err
	}
	rate := 100.0 // a guess when nothing periodic was created to measure
	if len(ps) > 0 && took > 0 {
		rate = float64(len(ps)) / took.Seconds()
	}
	from := r.windowStart().Add(leadFor(nOneShot, rate))
	to := from.Add(r.o.Duration)
	shots := make([]timerRequest, nOneShot)
	winMS := r.o.Duration.Milliseconds()
	for i := range shots {
		// Spread over the window at odd milliseconds (not only whole seconds).
		off := (int64(i)*7919 + 13) % winMS
		shots[i] = r.req("oneshot", schedule.Spec{At: schedule.FormatTime(from.Add(time.Duration(off) * time.Millisecond))}, 0)
	}
	shotPs, took, err := r.create(ctx, "oneshot", shots)
	r.recordCreation(len(shotPs), took)
	if err != nil {
		return err
	}
	if late := r.recv.now().Sub(from); late > 0 {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("one-shot creation ended %s after the window start: early one-shots were created after their due time", late))
	}
	m, err := r.measure(ctx, append(ps, shotPs...), from, to, true, false)
	r.fill(m)
	r.rep.Kinds = kindResults(m.tallies)
	return err
}
