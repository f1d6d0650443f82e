package test

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tockd/tock/conf"
)

// plannedTimer is what the scenario created and what it expects of it.
type plannedTimer struct {
	id       int64
	oneShot  bool
	at       time.Time     // one-shot due time
	first    time.Time     // periodic: first occurrence (next_fire_at at creation)
	created  time.Time     // created_at: an occurrence in that very millisecond may fire too
	period   time.Duration // periodic
	disStart time.Time     // periodic: just before the disable call
	disDone  time.Time     // periodic: after the disable call returned
}

type scenario struct {
	periodic int // "every" timers
	cron     int // crons in a non-UTC zone with the same period
	// period of the periodic and cron timers: 1s or 2s. Default 1s.
	period   time.Duration
	oneShots int // due within the next seconds
	run      time.Duration
	// runUntil, when set, overrides run: keep firing until this wall time.
	runUntil func(created time.Time) time.Time
}

// margin is how long before a disable an occurrence must already have been delivered. The
// engine's lateness is milliseconds; seconds keep the test free of timing flakes.
const margin = 2 * time.Second

// runFiring creates the scenario's timers through api[0], lets them fire, disables the periodic
// ones (spreading the calls over every instance), and checks every delivery: all expected
// occurrences arrived exactly once with the right headers, none early, none after its timer was
// disabled. It returns the deliveries and the executions of every timer by instance.
func runFiring(t *testing.T, apis []client, recv *receiver, sc scenario) ([]delivery, map[string]int) {
	t.Helper()
	app := uniqueApp("e2e")
	var planned []*plannedTimer
	create := func(i int, body map[string]any) timerJSON {
		body["app"] = app
		body["name"] = fmt.Sprintf("t-%04d", i)
		var tj timerJSON
		if code := apis[i%len(apis)].do("POST", "/api/v1/timers", body, &tj); code != 201 {
			t.Fatalf("create %d: status %d", i, code)
		}
		return tj
	}
	callback := func(i int) map[string]any {
		return map[string]any{
			"url": recv.srv.URL + "/hook", "method": "PUT", "body": fmt.Sprintf(`{"n":%d}`, i),
			"headers": map[string]string{"X-Custom": "v" + strconv.Itoa(i)},
		}
	}
	period, cronExpr := time.Second, "* * * * * *"
	if sc.period == 2*time.Second {
		period, cronExpr = sc.period, "*/2 * * * * *"
	}
	n := 0
	for i := 0; i < sc.periodic; i++ {
		tj := create(n, map[string]any{"schedule": map[string]any{"every": period.String()}, "callback": callback(n)})
		planned = append(planned, &plannedTimer{id: tj.ID, first: mustParseTime(t, *tj.NextFireAt), created: mustParseTime(t, tj.CreatedAt), period: period})
		n++
	}
	for i := 0; i < sc.cron; i++ {
		tj := create(n, map[string]any{"schedule": map[string]any{"cron": cronExpr, "timezone": "Asia/Kathmandu"}, "callback": callback(n)})
		planned = append(planned, &plannedTimer{id: tj.ID, first: mustParseTime(t, *tj.NextFireAt), created: mustParseTime(t, tj.CreatedAt), period: period})
		n++
	}
	for i := 0; i < sc.oneShots; i++ {
		// Odd milliseconds, so firing at the millisecond (not the next poll) is what is tested.
		at := time.Now().Add(time.Second + time.Duration(i*37%3000)*time.Millisecond).Truncate(time.Millisecond)
		tj := create(n, map[string]any{"schedule": map[string]any{"at": at.UTC().Format(time.RFC3339Nano)}, "callback": callback(n)})
		planned = append(planned, &plannedTimer{id: tj.ID, oneShot: true, at: at})
		n++
	}
	created := time.Now()
	until := created.Add(sc.run)
	if sc.runUntil != nil {
		until = sc.runUntil(created)
	}
	time.Sleep(time.Until(until))

	var wg sync.WaitGroup
	for i, p := range planned {
		if p.oneShot {
			continue
		}
		wg.Add(1)
		go func(i int, p *plannedTimer) {
			defer wg.Done()
			p.disStart = time.Now()
			var tj timerJSON
			if code := apis[i%len(apis)].do("POST", fmt.Sprintf("/api/v1/timers/%d/disable", p.id), nil, &tj); code != 200 || tj.Status != "disabled" {
				t.Errorf("disable %d: %d %s", p.id, code, tj.Status)
			}
			p.disDone = time.Now()
		}(i, p)
	}
	wg.Wait()
	// Callbacks already in flight may still land; then nothing more may come.
	time.Sleep(1500 * time.Millisecond)

	byTimer := map[int64]map[int64]int{}
	all := recv.deliveries()
	for _, d := range all {
		if byTimer[d.TimerID] == nil {
			byTimer[d.TimerID] = map[int64]int{}
		}
		byTimer[d.TimerID][d.ScheduledMS]++
		if d.Attempt != "1" || d.Key != fmt.Sprintf("%d:%d", d.TimerID, d.ScheduledMS) || !scheduledAtFormat.MatchString(d.ScheduledAt) {
			t.Errorf("bad headers: %+v", d)
		}
		if d.Method != "PUT" || d.Custom == "" || d.Body == "" {
			t.Errorf("callback not sent verbatim: %+v", d)
		}
		if d.Arrived.Before(time.UnixMilli(d.ScheduledMS)) {
			t.Errorf("timer %d occurrence %s arrived early at %s", d.TimerID, d.ScheduledAt, d.Arrived.Format(time.RFC3339Nano))
		}
	}
	expected, dup := 0, 0
	for _, p := range planned {
		got := byTimer[p.id]
		for ms, c := range got {
			if c > 1 {
				dup++
				t.Errorf("timer %d occurrence %d delivered %d times", p.id, ms, c)
			}
		}
		if p.oneShot {
			expected++
			if len(got) != 1 || got[p.at.UnixMilli()] != 1 {
				t.Errorf("one-shot %d due %s: deliveries %v", p.id, p.at.Format(time.RFC3339Nano), got)
			}
			continue
		}
		for ms := range got {
			s := time.UnixMilli(ms)
			// next_fire_at counts strictly after the creation instant; the engine also fires an
			// occurrence in the creation's own millisecond (it stores milliseconds).
			if (s.Before(p.first) && !s.Equal(p.created)) || s.Sub(p.first)%p.period != 0 {
				t.Errorf("timer %d fired %s, not an occurrence of its schedule", p.id, s.Format(time.RFC3339Nano))
			}
			// An occurrence due within engine.claim_ahead of the disable may have been claimed
			// before it (documented); anything later must not fire.
			if s.After(p.disDone.Add(conf.Default().Engine.ClaimAhead.D())) {
				t.Errorf("timer %d fired occurrence %s scheduled more than claim_ahead after its disable returned at %s", p.id, s.Format(time.RFC3339Nano), p.disDone.Format(time.RFC3339Nano))
			}
		}
		for s := p.first; s.Before(p.disStart.Add(-margin)); s = s.Add(p.period) {
			expected++
			if got[s.UnixMilli()] == 0 {
				t.Errorf("timer %d: occurrence %s never arrived", p.id, s.Format(time.RFC3339Nano))
			}
		}
	}
	t.Logf("%d timers, %d expected occurrences, %d deliveries, %d duplicates; %s", len(planned), expected, len(all), dup, lateness(all))
	if expected == 0 {
		t.Fatal("the scenario expected nothing: it tests nothing")
	}

	// One-shots end completed; the executions API shows what ran, where and when.
	instances := map[string]int{}
	for _, p := range planned {
		if p.oneShot {
			waitUntil(t, time.Now().Add(10*time.Second), "one-shot completed", func() bool {
				var tj timerJSON
				apis[0].do("GET", fmt.Sprintf("/api/v1/timers/%d", p.id), nil, &tj)
				return tj.Status == "completed"
			})
		}
		execs := apis[0].executions(p.id)
		if len(execs) != len(byTimer[p.id]) {
			t.Errorf("timer %d: %d executions recorded, %d deliveries", p.id, len(execs), len(byTimer[p.id]))
		}
		for _, e := range execs {
			instances[e.Instance]++
			if e.Status != "succeeded" || e.Attempt != 1 || e.HTTPStatus != 204 || e.StartedAt == nil || e.FinishedAt == nil {
				t.Errorf("timer %d execution %+v", p.id, e)
				continue
			}
			if mustParseTime(t, *e.StartedAt).Before(mustParseTime(t, e.ScheduledAt)) {
				t.Errorf("execution %d started before its scheduled time", e.ID)
			}
		}
	}
	return all, instances
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The end-to-end tests in this package run one at a time: each measures real timing, and
// running them side by side on a small machine would measure the machine instead.

func TestFiringEmbeddedRealClock(t *testing.T) {
	recv := newReceiver(t)
	api := startApp(t, embeddedBackend().config(t, "embedded-1"))
	// Every 2 s: about 75 fires/s, what SQLite under the race detector on 2 cores carries with
	// room to spare (the MariaDB test below fires every second).
	runFiring(t, []client{api}, recv, scenario{periodic: 120, cron: 30, oneShots: 50, period: 2 * time.Second, run: 8 * time.Second})
}

func TestFiringMariaDBRedisRealClock(t *testing.T) {
	b := realBackend(t)
	recv := newReceiver(t)
	api := startApp(t, b.config(t, "real-1"))
	all, _ := runFiring(t, []client{api}, recv, scenario{periodic: 120, cron: 30, oneShots: 50, run: 6 * time.Second})
	checkEngineMetrics(t, api, len(all))
}

// checkEngineMetrics reads /metrics of the one instance that made every delivery: each
// delivered occurrence is an execution that succeeded and a lateness sample, and the engine
// took slice locks and stamped occurrences.
func checkEngineMetrics(t *testing.T, api client, delivered int) {
	t.Helper()
	resp, err := api.http.Get(api.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	value := func(series string) float64 {
		for _, line := range strings.Split(string(raw), "\n") {
			if rest, ok := strings.CutPrefix(line, series+" "); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err != nil {
					t.Fatalf("%s: %q", series, line)
				}
				return v
			}
		}
		t.Fatalf("/metrics lacks %s", series)
		return 0
	}
	if got := value(`tock_executions_total{outcome="succeeded"}`); int(got) < delivered {
		t.Errorf("tock_executions_total{succeeded} = %v, want at least the %d deliveries", got, delivered)
	}
	if got := value("tock_lateness_seconds_count"); int(got) < delivered {
		t.Errorf("tock_lateness_seconds_count = %v, want at least the %d deliveries", got, delivered)
	}
	for _, series := range []string{"tock_slice_locks_taken_total", `tock_occurrences_stamped_total{source="change"}`} {
		if value(series) <= 0 {
			t.Errorf("%s is 0", series)
		}
	}
	t.Logf("metrics: succeeded %v, lateness samples %v", value(`tock_executions_total{outcome="succeeded"}`), value("tock_lateness_seconds_count"))
}
