package scheduler_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
	"github.com/tockd/tock/scheduler"
)

// TestMetricsCountLocks: the scheduler takes the current and previous minute's slices, the
// previous ones (empty, settled) complete and are extended, and the current ones' leases,
// deleted behind the scheduler's back, are found lost at the next renewal.
func TestMetricsCountLocks(t *testing.T) {
	t.Parallel()
	clk := clockwork.NewFakeClockAt(minute.Add(10 * time.Second))
	r := indextest.Miniredis(t, clk)
	b := &testBundle{clk: clk, redis: r, idx: index.New(r.Client, index.NewKeys(r.Prefix, 2))}
	reg := prometheus.NewRegistry()
	s, err := scheduler.New(scheduler.Config{Buckets: 2, Clock: clk, Logger: slog.New(slog.DiscardHandler), Registerer: reg},
		b.idx, &fakeExec{clk: clk, mu: &b.mu, subs: &b.subs})
	if err != nil {
		t.Fatal(err)
	}
	b.scheds = append(b.scheds, s)
	b.start(t)
	b.settle(t)

	for bucket := range 2 {
		key := b.idx.Keys().SliceLock(index.Slice{Start: minute, Bucket: bucket})
		if n, err := r.Client.Del(context.Background(), key).Result(); err != nil || n != 1 {
			t.Fatalf("delete the lock of bucket %d: %d, %v", bucket, n, err)
		}
	}
	b.runTo(t, clk.Now().Add(time.Second))

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
			got[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if got["tock_slice_locks_taken_total"] < 4 {
		t.Errorf("locks taken = %v, want at least 4 (2 buckets, 2 minutes)", got["tock_slice_locks_taken_total"])
	}
	for k, w := range map[string]float64{
		"tock_slice_locks_extended_total/complete": 2, // the previous minute's slices
		"tock_slice_runs_total/complete":           2,
		"tock_slice_locks_lost_total":              2, // the current minute's, deleted
		"tock_slice_runs_total/deadline":           2,
		"tock_slice_lock_errors_total/renew":       0,
	} {
		if v, ok := got[k]; !ok || v != w {
			t.Errorf("%s = %v, want %v (all: %v)", k, v, w, got)
		}
	}
}
