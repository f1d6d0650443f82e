package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tockd/tock/schedule"
)

func TestPercentileNearestRank(t *testing.T) {
	s := make([]float64, 100)
	for i := range s {
		s[i] = float64(i + 1) // 1..100
	}
	for _, c := range []struct {
		p    float64
		want float64
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}, {0.001, 1}} {
		if got := percentile(s, c.p); got != c.want {
			t.Errorf("p%g of 1..100 = %g, want %g", c.p*100, got, c.want)
		}
	}
	if got := percentile([]float64{7}, 0.99); got != 7 {
		t.Errorf("p99 of one sample = %g", got)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("p50 of none = %g", got)
	}
}

func TestComputeStats(t *testing.T) {
	// Unsorted input with a tail: 1000 samples of 1..1000 ms, shuffled by a stride.
	s := make([]float64, 1000)
	for i := range s {
		s[i] = float64((i*7919)%1000 + 1)
	}
	st := computeStats(s)
	want := Stats{N: 1000, Min: 1, Mean: 500.5, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
	if (computeStats(nil) != Stats{}) {
		t.Error("stats of no samples should be zero")
	}
}

func mustPlanned(t *testing.T, kind string, tr timerResponse) *planned {
	t.Helper()
	p, err := newPlanned(kind, tr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func strp(s string) *string { return &s }

func TestExpectedOccurrences(t *testing.T) {
	base := time.Date(2026, 3, 29, 0, 59, 50, 0, time.UTC) // Europe/Berlin springs forward at 01:00 UTC
	every := mustPlanned(t, "every", timerResponse{ID: 1, Schedule: schedule.Spec{Every: "2s"},
		NextFireAt: strp("2026-03-29T00:59:41.234Z")})
	cron := mustPlanned(t, "cron", timerResponse{ID: 2, Schedule: schedule.Spec{Cron: "*/5 * * * * *", Timezone: "Asia/Kathmandu"}})
	hourly := mustPlanned(t, "cron-minute", timerResponse{ID: 3, Schedule: schedule.Spec{Cron: "0 * * * *", Timezone: "Europe/Berlin"}})
	in := mustPlanned(t, "oneshot", timerResponse{ID: 4, Schedule: schedule.Spec{At: "2026-03-29T00:59:55.007Z"}})
	out := mustPlanned(t, "oneshot", timerResponse{ID: 5, Schedule: schedule.Spec{At: "2026-03-29T01:00:10.000Z"}})

	exp := expectedIn([]*planned{every, cron, hourly, in, out}, base, base.Add(20*time.Second)) // [00:59:50, 01:00:10)
	want := map[occKey]bool{}
	// every 2s from the anchor 00:59:39.234: 51.234, 53.234, ..., 09.234 (10 of them).
	for ms := base.Add(1234 * time.Millisecond); ms.Before(base.Add(20 * time.Second)); ms = ms.Add(2 * time.Second) {
		want[occKey{1, ms.UnixMilli()}] = true
	}
	for s := 0; s < 20; s += 5 {
		want[occKey{2, base.Add(time.Duration(s) * time.Second).UnixMilli()}] = true
	}
	want[occKey{3, time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC).UnixMilli()}] = true // 03:00 CEST, right after the gap
	want[occKey{4, time.Date(2026, 3, 29, 0, 59, 55, 7e6, time.UTC).UnixMilli()}] = true
	if len(exp) != len(want) {
		t.Errorf("expected %d occurrences, want %d: %v", len(exp), len(want), exp)
	}
	for k := range want {
		if exp[k] == nil {
			t.Errorf("occurrence %+v (%s) missing", k, time.UnixMilli(k.MS).UTC().Format(time.RFC3339Nano))
		}
	}
	perTimer := map[int64]int{}
	for k := range exp {
		perTimer[k.ID]++
	}
	if perTimer[1] != 10 || perTimer[2] != 4 || perTimer[3] != 1 || perTimer[4] != 1 || perTimer[5] != 0 {
		t.Errorf("occurrences per timer %v, want every 10, cron 4, hourly 1, one-shot 1", perTimer)
	}
}

func TestNewPlannedNeedsNextFireAtForEvery(t *testing.T) {
	if _, err := newPlanned("every", timerResponse{ID: 9, Schedule: schedule.Spec{Every: "1s"}}); err == nil {
		t.Error("an every timer without next_fire_at was accepted")
	}
}

func TestAnalyze(t *testing.T) {
	p := &planned{ID: 1, Kind: "every"}
	q := &planned{ID: 2, Kind: "retry"}
	ours := map[int64]*planned{1: p, 2: q}
	ms := func(s int) int64 { return int64(1_000_000 + s*1000) }
	exp := map[occKey]*planned{{1, ms(0)}: p, {1, ms(1)}: p, {1, ms(2)}: p, {2, ms(0)}: q}
	ns := func(m int64, lateMS float64) int64 { return m*1e6 + int64(lateMS*1e6) }
	ds := []delivery{
		{TimerID: 1, SchedMS: ms(0), ArrivalNS: ns(ms(0), 5), Status: 200},
		{TimerID: 1, SchedMS: ms(0), ArrivalNS: ns(ms(0), 9), Status: 200},         // duplicate
		{TimerID: 1, SchedMS: ms(1), ArrivalNS: ns(ms(1), -1), Status: 200},        // early
		{TimerID: 1, SchedMS: ms(0) + 500, ArrivalNS: ns(ms(0), 600), Status: 200}, // not an occurrence
		{TimerID: 1, SchedMS: ms(9), ArrivalNS: ns(ms(9), 1), Status: 200},         // outside the window
		{TimerID: 2, SchedMS: ms(0), ArrivalNS: ns(ms(0), 2), Status: 500},         // failed on purpose
		{TimerID: 2, SchedMS: ms(0), ArrivalNS: ns(ms(0), 400), Status: 200},       // then delivered
		{TimerID: 77, SchedMS: ms(0), ArrivalNS: ns(ms(0), 1), Status: 200},        // not ours
	}
	res := analyze([]*planned{p, q}, exp, ours, ds, func(m int64) bool { return m >= ms(0) && m < ms(3) })
	all, every, retry := res[""], res["every"], res["retry"]
	if want := (Counts{Expected: 4, Delivered: 3, Missed: 1, Early: 1, Duplicates: 1, Failed: 1, Unexpected: 1}); all.Counts != want {
		t.Errorf("total %+v, want %+v", all.Counts, want)
	}
	if every.timers != 1 || retry.timers != 1 || every.Expected != 3 || retry.Delivered != 1 || retry.Failed != 1 {
		t.Errorf("per kind: every %+v (timers %d), retry %+v", every.Counts, every.timers, retry.Counts)
	}
	// Lateness of the first arrival per occurrence; the retried one also by its 2xx arrival.
	if st := computeStats(retry.first); st.N != 1 || st.Max != 2 {
		t.Errorf("retry first-arrival lateness %+v", st)
	}
	if st := computeStats(retry.ok); st.N != 1 || st.Max != 400 {
		t.Errorf("retry 2xx lateness %+v", st)
	}
	if st := computeStats(every.first); st.N != 2 || st.Min != -1 || st.Max != 5 {
		t.Errorf("every lateness %+v", st)
	}
	if n := earlyAnywhere(ours, ds); n != 1 {
		t.Errorf("early anywhere %d", n)
	}
}

func TestParseProcessMetrics(t *testing.T) {
	text := "# HELP process_cpu_seconds_total x\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n" +
		"process_resident_memory_bytes 3.1e+07\ngo_goroutines 10\n"
	m, err := parseProcessMetrics(strings.NewReader(text))
	if err != nil || m.CPUSeconds != 12.5 || m.RSSBytes != 3.1e7 || !m.OK {
		t.Errorf("parsed %+v, %v", m, err)
	}
	if _, err := parseProcessMetrics(strings.NewReader("go_goroutines 1\n")); err == nil {
		t.Error("metrics without process_* were accepted")
	}
}

func TestOptionsValidation(t *testing.T) {
	_, err := Run(context.Background(), Options{Workload: "sideways", Log: quietLog()})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "sideways") {
		t.Errorf("bad workload: %v", err)
	}
	_, err = Run(context.Background(), Options{Workload: Steady, Period: 500 * time.Millisecond, URLs: []string{"ftp://x"}, Log: quietLog()})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--period") || !strings.Contains(err.Error(), "--url") {
		t.Errorf("bad period and url: %v", err)
	}
}

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// checkRun asserts a run's report: everything expected arrived once, nothing early, the
// JSON round-trips and the table prints.
func checkRun(t *testing.T, rep *Report, err error) *Report {
	t.Helper()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
	if rep.Expected == 0 || rep.Delivered != rep.Expected || rep.Missed != 0 || rep.Early != 0 || rep.EarlyAnywhere != 0 {
		t.Errorf("expected %d delivered %d missed %d early %d/%d", rep.Expected, rep.Delivered, rep.Missed, rep.Early, rep.EarlyAnywhere)
	}
	if rep.Unexpected != 0 || rep.BadHeaders != 0 || !rep.Pass {
		t.Errorf("unexpected %d bad headers %d pass %v", rep.Unexpected, rep.BadHeaders, rep.Pass)
	}
	if rep.Lateness.N != rep.Expected || rep.Lateness.Min < 0 {
		t.Errorf("lateness %+v for %d expected", rep.Lateness, rep.Expected)
	}
	if rep.CleanupError != "" || !strings.HasPrefix(rep.CleanupMethod, "batch") {
		t.Errorf("cleanup %q: %s", rep.CleanupMethod, rep.CleanupError)
	}
	dir := t.TempDir()
	path, err := rep.SaveIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^` + rep.Workload + `-embedded-\d{8}-\d{6}\.json$`).MatchString(filepath.Base(path)) {
		t.Errorf("file name %s", filepath.Base(path))
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("report JSON does not decode: %v", err)
	}
	if back.Expected != rep.Expected || back.Delivered != rep.Delivered || back.Lateness != rep.Lateness || back.Target.Store != "sqlite" {
		t.Errorf("JSON round trip: %+v", back)
	}
	return &back
}

func TestSteadyEmbedded(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Options{Workload: Steady, Timers: 20, Period: time.Second, Duration: 3 * time.Second,
		Warmup: time.Second, Grace: 5 * time.Second, MaxRuntime: time.Minute, Log: testLog(t)})
	back := checkRun(t, rep, err)
	// 20 timers every second over 3 s: exactly 60, whatever their phase.
	if back.Expected != 60 || back.TimersCreated != 20 || back.CreatedPerSec <= 0 {
		t.Errorf("expected %d of %d timers (created/s %g)", back.Expected, back.TimersCreated, back.CreatedPerSec)
	}
	if back.Resources == nil || back.Resources.CPUSeconds <= 0 || len(back.Resources.Nodes) != 1 || back.Resources.Nodes[0].RSSAfterBytes <= 0 {
		t.Errorf("resources %+v", back.Resources)
	}
}

func TestBurstEmbedded(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Options{Workload: Burst, Timers: 50, Warmup: time.Second, Grace: 5 * time.Second,
		MaxRuntime: time.Minute, Log: testLog(t)})
	back := checkRun(t, rep, err)
	if back.Expected != 50 || back.Burst == nil || back.Burst.CreationMarginMS <= 0 || back.Burst.LastArrivalMS < back.Burst.FirstArrivalMS {
		t.Errorf("burst %+v expected %d", back.Burst, back.Expected)
	}
}

func TestMixedEmbedded(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Options{Workload: Mixed, Timers: 30, Duration: 4 * time.Second, FailShare: 0.2, FailAttempts: 1,
		Warmup: time.Second, Grace: 5 * time.Second, MaxRuntime: time.Minute, Log: testLog(t)})
	back := checkRun(t, rep, err)
	kinds := map[string]KindResult{}
	for _, k := range back.Kinds {
		kinds[k.Kind] = k
	}
	// 6 failing timers every 2 s over 4 s: each occurrence failed once, then was delivered.
	if r := kinds["retry"]; r.Timers != 6 || r.Expected != 12 || r.Failed != r.Expected || r.Delivered != r.Expected || r.LatenessDelivered == nil {
		t.Errorf("retry kind %+v", r)
	}
	for _, k := range []string{"every", "cron", "oneshot"} {
		if kinds[k].Expected == 0 || kinds[k].Delivered != kinds[k].Expected {
			t.Errorf("kind %s: %+v", k, kinds[k])
		}
	}
}
