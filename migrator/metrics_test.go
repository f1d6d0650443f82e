package migrator_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/migrator"
	"github.com/tockd/tock/schedule"
)

func TestMetricsCountStampedOccurrences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	b := setupCfg(t, at(10, 0, 0), migrator.Config{Step: time.Hour, Registerer: reg})
	first := b.create(t, schedule.Spec{Every: "10m"}, at(9, 0, 0))
	if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
		t.Fatal(err)
	}
	second := b.create(t, schedule.Spec{Every: "15m"}, at(9, 0, 0))
	if err := b.mig.TimerChanged(ctx, nil, second); err != nil {
		t.Fatal(err)
	}

	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "/" + l.GetValue()
			}
			got[key] = m.GetCounter().GetValue()
		}
	}
	window, change := len(b.stamped(t, first.ID)), len(b.stamped(t, second.ID))
	if window == 0 || change == 0 {
		t.Fatalf("stamped %d and %d occurrences; the scenario should stamp both timers", window, change)
	}
	want := map[string]float64{
		"tock_occurrences_stamped_total/window": float64(window),
		"tock_occurrences_stamped_total/change": float64(change),
		"tock_store_errors_total/migrator":      0,
	}
	for k, w := range want {
		if v, ok := got[k]; !ok || v != w {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], w, got)
		}
	}
}
