package executor_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/metrics/metricstest"
)

func counter(t *testing.T, g prometheus.Gatherer, name string, want ...string) float64 {
	t.Helper()
	v, _ := metricstest.Value(t, g, name, want...)
	return v
}

// brokenTimers fails every timer read, as a store that is down would.
type brokenTimers struct{ executor.Store }

func (brokenTimers) GetTimer(context.Context, int64) (dao.Timer, error) {
	return dao.Timer{}, errors.New("store down")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CountsOutcomesLatenessAndDuration", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		b := setup(t, nil, executor.Config{Registerer: reg})
		ok := newReceiver(t, nil)
		bad := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) })
		good := b.createTimer(t, everySecond, dao.Callback{URL: ok.URL, TimeoutMS: 2000})
		failing := b.createTimer(t, everySecond, dao.Callback{URL: bad.URL, TimeoutMS: 2000})

		// Executed 250 ms and 1250 ms after their scheduled times.
		b.clk.Advance(3250 * time.Millisecond)
		occ := executor.Occurrence{TimerID: good.ID, ScheduledMS: t0.Add(3 * time.Second).UnixMilli()}
		if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Succeeded {
			t.Fatalf("first run: %+v", res)
		}
		if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Skipped {
			t.Fatalf("second run: %+v, want skipped", res)
		}
		occ = executor.Occurrence{TimerID: failing.ID, ScheduledMS: t0.Add(2 * time.Second).UnixMilli()}
		if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Failed {
			t.Fatalf("failing run: %+v", res)
		}

		for outcome, want := range map[executor.Outcome]float64{
			executor.Succeeded: 1, executor.Skipped: 1, executor.Failed: 1, executor.Retrying: 0, executor.Unrecorded: 0,
		} {
			if got := counter(t, reg, "tock_executions_total", "outcome", string(outcome)); got != want {
				t.Errorf("executions{outcome=%s} = %v, want %v", outcome, got, want)
			}
		}
		n, sum := metricstest.Value(t, reg, "tock_lateness_seconds")
		if n != 2 || math.Abs(sum-1.5) > 1e-9 {
			t.Errorf("lateness: %v observations summing to %vs, want 2 summing to 1.5s", n, sum)
		}
		if n := counter(t, reg, "tock_callback_duration_seconds"); n != 2 {
			t.Errorf("callback durations observed %v times, want 2", n)
		}
		if n := counter(t, reg, "tock_retries_total"); n != 0 {
			t.Errorf("retries = %v, want 0", n)
		}
		if n := counter(t, reg, "tock_store_errors_total", "component", "executor"); n != 0 {
			t.Errorf("store errors = %v, want 0", n)
		}
	})

	t.Run("StoreFailureIsUnrecordedAndAStoreError", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		b := setup(t, brokenTimers{daotest.SQLite(t)}, executor.Config{Registerer: reg})
		if res := b.exec.Execute(ctx, executor.Occurrence{TimerID: 1, ScheduledMS: t0.UnixMilli()}); res.Outcome != executor.Unrecorded {
			t.Fatalf("run: %+v, want unrecorded", res)
		}
		if n := counter(t, reg, "tock_executions_total", "outcome", "unrecorded"); n != 1 {
			t.Errorf("executions{outcome=unrecorded} = %v, want 1", n)
		}
		if n := counter(t, reg, "tock_store_errors_total", "component", "executor"); n != 1 {
			t.Errorf("store errors = %v, want 1", n)
		}
		if n := counter(t, reg, "tock_lateness_seconds"); n != 0 {
			t.Errorf("lateness observed %v times without a callback", n)
		}
	})

	t.Run("RetryIsAnAttemptBeyondTheFirstWithoutLateness", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		b := setup(t, nil, executor.Config{Registerer: reg, Jitter: identityJitter})
		var calls atomic.Int64
		rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
			if calls.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		tm := b.withRetry(t, b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL, TimeoutMS: 2000}),
			dao.RetryPolicy{MaxAttempts: 2, BackoffMS: 1000, MaxBackoffMS: 1000})
		if res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()}); res.Outcome != executor.Retrying {
			t.Fatalf("first attempt: %+v, want retrying", res)
		}
		b.clk.Advance(time.Second)
		claimed, err := b.store.ClaimDueRetries(ctx, dao.ClaimRetriesParams{Owner: "test-1", NowMS: b.clk.Now().UnixMilli(), Limit: 10})
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim the retry: %+v, %v", claimed, err)
		}
		if res := b.exec.RunClaimed(ctx, claimed[0]); res.Outcome != executor.Succeeded {
			t.Fatalf("second attempt: %+v", res)
		}
		if n := counter(t, reg, "tock_retries_total"); n != 1 {
			t.Errorf("retries = %v, want 1", n)
		}
		if n := counter(t, reg, "tock_lateness_seconds"); n != 1 {
			t.Errorf("lateness observed %v times, want 1 (first attempt only)", n)
		}
		if n := counter(t, reg, "tock_callback_duration_seconds"); n != 2 {
			t.Errorf("callback durations observed %v times, want 2", n)
		}
		if r, s := counter(t, reg, "tock_executions_total", "outcome", "retrying"), counter(t, reg, "tock_executions_total", "outcome", "succeeded"); r != 1 || s != 1 {
			t.Errorf("executions retrying %v, succeeded %v; want 1 and 1", r, s)
		}
	})

	t.Run("PoolGaugesShowBusyAndQueued", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		b := setup(t, nil, executor.Config{Registerer: reg, PoolSize: 1})
		release := make(chan struct{})
		rcv := newReceiver(t, func(http.ResponseWriter, *http.Request) { <-release })
		released := false
		unblock := func() {
			if !released {
				released = true
				close(release)
			}
		}
		defer unblock() // before the receiver's cleanup, which waits for its handlers
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL, TimeoutMS: 10000})
		b.clk.Advance(5 * time.Second)
		submitted := make(chan error, 3)
		for i := range 3 {
			occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Duration(i+1) * time.Second).UnixMilli()}
			go func() { submitted <- b.exec.Submit(ctx, occ, func(executor.Result) {}) }()
		}
		waitFor := func(busy, queued float64) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for {
				gb, gq := counter(t, reg, "tock_executor_busy"), counter(t, reg, "tock_executor_queued")
				if gb == busy && gq == queued {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("busy %v, queued %v; want %v and %v", gb, gq, busy, queued)
				}
				time.Sleep(time.Millisecond)
			}
		}
		waitFor(1, 2)
		if n := counter(t, reg, "tock_executor_pool_size"); n != 1 {
			t.Errorf("pool size = %v, want 1", n)
		}
		unblock()
		for range 3 {
			if err := <-submitted; err != nil {
				t.Fatal(err)
			}
		}
		drain(t, b.exec)
		waitFor(0, 0)
	})

	t.Run("PollerCountsTakeoversAndStoreErrors", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		b := setup(t, nil, executor.Config{Registerer: reg})
		ps := &stalePollerStore{reset: []dao.Execution{{ID: 1}, {ID: 2}}}
		p, err := executor.NewPoller(executor.PollerConfig{InstanceID: "test-1", Clock: b.clk,
			Logger: slog.New(slog.DiscardHandler), Registerer: reg}, ps, b.exec)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.RunOnce(ctx, b.clk.Now()); err == nil {
			t.Fatal("pass with a failing claim succeeded")
		}
		if n := counter(t, reg, "tock_takeovers_total"); n != 2 {
			t.Errorf("takeovers = %v, want 2", n)
		}
		if n := counter(t, reg, "tock_store_errors_total", "component", "poller"); n != 1 {
			t.Errorf("poller store errors = %v, want 1", n)
		}
	})
}

// stalePollerStore resets the executions in reset, then fails to claim retries.
type stalePollerStore struct{ reset []dao.Execution }

func (s *stalePollerStore) ResetStaleExecutions(context.Context, dao.ResetStaleParams) ([]dao.Execution, error) {
	return s.reset, nil
}

func (s *stalePollerStore) ClaimDueRetries(context.Context, dao.ClaimRetriesParams) ([]dao.Execution, error) {
	return nil, errors.New("store down")
}

func (s *stalePollerStore) HandBackExecution(context.Context, int64, string, int64) error { return nil }
