package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/conf"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
	"github.com/tockd/tock/metrics/metricstest"
	"github.com/tockd/tock/schedule"
)

// TestEngineMetrics runs the engine in virtual time on SQLite and miniredis with its metrics
// on one registry, fires a timer for a minute, and checks the metrics against what the
// receiver saw.
func TestEngineMetrics(t *testing.T) {
	t.Parallel()
	start := nine.Add(-3 * time.Second)
	clk := clockwork.NewFakeClockAt(start)
	h := &harness{clk: clk, redis: indextest.Miniredis(t, clk), store: daotest.SQLite(t)}
	h.rcv = newReceiver(t, clk)
	cfg := conf.Default()
	cfg.InstanceID = "metrics-0"
	cfg.Redis.KeyPrefix = h.redis.Prefix
	cfg.Engine.Buckets = 2
	cfg.Engine.PoolSize = 32
	cfg.HTTP.ShutdownTimeout = conf.Duration(5 * time.Second)
	reg := prometheus.NewRegistry()
	if err := index.Instrument(h.redis.Client, reg); err != nil {
		t.Fatal(err)
	}
	e, err := newEngine(cfg, h.store, h.redis.Client, clk, slog.New(slog.DiscardHandler), WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	h.engines = append(h.engines, e)
	t.Cleanup(e.Stop)

	tm := h.create(t, schedule.Spec{Every: "2s"}, start)
	h.start(t)
	// Past the first minute and its grace period, so its slices complete.
	end := nine.Add(65 * time.Second)
	want := occurrences(t, tm, start, end)
	h.runTo(t, end, want...)
	checkExactlyOnce(t, h, tm, want, true)
	fires := float64(len(want))

	value := func(name string, labels ...string) float64 {
		t.Helper()
		v, _ := metricstest.Value(t, reg, name, labels...)
		return v
	}
	n, sum := metricstest.Value(t, reg, "tock_lateness_seconds")
	if n != fires || sum != 0 {
		t.Errorf("lateness: %v observations summing to %vs; want %v on time (virtual time)", n, sum, fires)
	}
	exact := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"tock_executions_total", []string{"outcome", "succeeded"}, fires},
		{"tock_executions_total", []string{"outcome", "failed"}, 0},
		{"tock_executions_total", []string{"outcome", "unrecorded"}, 0},
		{"tock_callback_duration_seconds", nil, fires},
		{"tock_occurrences_fired_total", nil, fires},
		{"tock_retries_total", nil, 0},
		{"tock_takeovers_total", nil, 0},
		{"tock_slice_locks_lost_total", nil, 0},
		{"tock_store_errors_total", nil, 0},
		{"tock_executor_pool_size", nil, 32},
		{"tock_executor_busy", nil, 0},
		{"tock_executor_queued", nil, 0},
	}
	for _, c := range exact {
		if got := value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	positive := []struct {
		name   string
		labels []string
	}{
		{"tock_slice_locks_taken_total", nil},
		{"tock_slice_locks_extended_total", []string{"reason", "renew"}},
		{"tock_slice_locks_extended_total", []string{"reason", "complete"}},
		{"tock_slice_runs_total", []string{"result", "complete"}},
		{"tock_occurrences_stamped_total", []string{"source", "change"}},
		{"tock_slices_running", nil},
	}
	for _, c := range positive {
		if got := value(c.name, c.labels...); got <= 0 {
			t.Errorf("%s%v = %v, want > 0", c.name, c.labels, got)
		}
	}
	if n := countFamily(t, reg, "tock_redis_errors_total"); n != 0 {
		t.Errorf("%v redis errors", n)
	}
	t.Logf("%v occurrences fired; %v slice locks taken, %v renewals, %v slices completed", fires,
		value("tock_slice_locks_taken_total"), value("tock_slice_locks_extended_total", "reason", "renew"),
		value("tock_slice_runs_total", "result", "complete"))
}

// TestAppServesEngineMetrics checks that /metrics exposes the engine's, the store pool's
// and the build's series from the start.
func TestAppServesEngineMetrics(t *testing.T) {
	cfg := conf.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Addr = "127.0.0.1:0"
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), clockwork.NewRealClock())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + a.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	for _, s := range []string{
		`tock_build_info{version=`,
		`tock_lateness_seconds_bucket{le="0.0005"}`,
		`tock_callback_duration_seconds_count`,
		`tock_executions_total{outcome="succeeded"}`,
		`tock_executions_total{outcome="unrecorded"}`,
		`tock_retries_total`,
		`tock_takeovers_total`,
		`tock_compensations_total`,
		`tock_missed_total`,
		`tock_slice_locks_taken_total`,
		`tock_slice_locks_lost_total`,
		`tock_slice_locks_extended_total{reason="renew"}`,
		`tock_occurrences_stamped_total{source="window"}`,
		`tock_executor_busy`,
		`tock_executor_queued`,
		`tock_store_errors_total{component="executor"}`,
		`tock_store_errors_total{component="migrator"}`,
		`go_sql_open_connections{db_name="sqlite"}`,
	} {
		if !strings.Contains(string(b), s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
}

// countFamily sums a counter family that may have no series yet.
func countFamily(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
