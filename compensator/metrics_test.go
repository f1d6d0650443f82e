package compensator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/compensator"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/metrics/metricstest"
)

// downStore fails the first read of every pass.
type downStore struct{ fakeStore }

func (*downStore) ListStuckExecutions(context.Context, int64, int) ([]dao.Execution, error) {
	return nil, errors.New("store down")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CountsCompensationsMissedAndPasses", func(t *testing.T) {
		t.Parallel()
		// Every instance was down from 10:00 to 11:30: the catch-up fires some missing
		// occurrences and records the others missed.
		down := t0.Add(10 * time.Hour)
		now := down.Add(90 * time.Minute)
		reg := prometheus.NewRegistry()
		s := daotest.SQLite(t)
		b := &bundle{store: s, clk: clockwork.NewFakeClockAt(now), recv: newReceiver(t), keys: index.NewKeys("t:", 2)}
		ex, err := executor.New(executor.Config{InstanceID: "i1", PoolSize: 8, Clock: b.clk, Logger: quiet, Registerer: reg}, s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ex.Stop)
		b.comp, err = compensator.New(compensator.Config{InstanceID: "i1", Clock: b.clk, Rate: 1000, Logger: quiet, Registerer: reg},
			compensator.Deps{Store: s, Executor: ex, Keys: b.keys})
		if err != nil {
			t.Fatal(err)
		}
		b.timer(t, "all", "5m", dao.MisfireFireAll, down.Add(-time.Hour))
		b.timer(t, "skip", "5m", dao.MisfireSkip, down.Add(-time.Hour))
		b.markDone(t, down.Add(-20*time.Minute), down)

		rep, err := b.comp.CatchUp(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Redriven == 0 || rep.Missed == 0 {
			t.Fatalf("report %+v: the scenario should fire and record missed", rep)
		}
		for _, c := range []struct {
			name   string
			labels []string
			want   int
		}{
			{"tock_compensations_total", nil, rep.Redriven},
			{"tock_missed_total", nil, rep.Missed},
			{"tock_executions_total", []string{"outcome", "succeeded"}, rep.Succeeded},
			{"tock_compensation_passes_total", []string{"kind", "catch_up", "result", "ok"}, 1},
			{"tock_compensation_passes_total", []string{"result", "error"}, 0},
			{"tock_store_errors_total", []string{"component", "compensator"}, 0},
		} {
			if got := metricValue(t, reg, c.name, c.labels...); got != float64(c.want) {
				t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
	})

	t.Run("FailedPassIsAStoreError", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		c, err := compensator.New(compensator.Config{InstanceID: "i1", Clock: clockwork.NewFakeClockAt(t0), Logger: quiet, Registerer: reg},
			compensator.Deps{Store: &downStore{}, Executor: &fakeExec{}, Keys: index.NewKeys("t:", 2)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.RunOnce(ctx, t0); err == nil {
			t.Fatal("pass over a failing store succeeded")
		}
		if n := metricValue(t, reg, "tock_store_errors_total", "component", "compensator"); n != 1 {
			t.Errorf("store errors = %v, want 1", n)
		}
		if n := metricValue(t, reg, "tock_compensation_passes_total", "kind", "scheduled", "result", "error"); n != 1 {
			t.Errorf("failed scheduled passes = %v, want 1", n)
		}
	})
}

// metricValue is the counter or gauge value of name's series carrying labels.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, _ := metricstest.Value(t, g, name, labels...)
	return v
}
