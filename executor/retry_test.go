package executor_test

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/executor"
)

// identityJitter makes the retry delay its cap, so virtual-time tests know when it is due.
func identityJitter(d time.Duration) time.Duration { return d }

func newPoller(t *testing.T, b *testBundle, instance string) *executor.Poller {
	t.Helper()
	p, err := executor.NewPoller(executor.PollerConfig{InstanceID: instance, Clock: b.clk, Logger: slog.New(slog.DiscardHandler)}, b.store, b.exec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// drain waits (wall time, bounded) until the executor has nothing in flight.
func drain(t *testing.T, e *executor.Executor) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.InFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("executor still busy after 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func (b *testBundle) withRetry(t *testing.T, tm dao.Timer, p dao.RetryPolicy) dao.Timer {
	t.Helper()
	tm.Retry = p
	out, err := b.store.UpdateTimer(context.Background(), tm, tm.Version, b.clk.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FailsTwiceThenSucceedsWithBackoffGaps", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{Jitter: identityJitter})
		var attempts []string
		rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			attempts = append(attempts, r.Header.Get(executor.HeaderAttempt))
			if len(attempts) <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		tm := b.withRetry(t, b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL}),
			dao.RetryPolicy{MaxAttempts: 5, BackoffMS: 1000, MaxBackoffMS: 60000})
		occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()}
		p := newPoller(t, b, "test-1")

		if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Retrying || res.HTTPStatus != 503 {
			t.Fatalf("first attempt: %+v, want retrying after 503", res)
		}
		e := b.executions(t, tm.ID)[0]
		times, _ := b.store.GetExecutionTimes(ctx, e.ID)
		if e.Status != dao.ExecPending || times.NextRetryMS != t0.Add(time.Second).UnixMilli() {
			t.Fatalf("after attempt 1: %+v %+v; want pending, next at +1s (backoff 1s)", e, times)
		}
		// Gap 1: 1s. Not due a millisecond early.
		b.clk.Advance(999 * time.Millisecond)
		if err := p.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		drain(t, b.exec)
		if rcv.calls.Load() != 1 {
			t.Fatalf("%d calls before the retry is due, want 1", rcv.calls.Load())
		}
		b.clk.Advance(time.Millisecond)
		_ = p.RunOnce(ctx, b.clk.Now())
		drain(t, b.exec)
		// Gap 2: 2s (doubled).
		times, _ = b.store.GetExecutionTimes(ctx, e.ID)
		if rcv.calls.Load() != 2 || times.NextRetryMS != t0.Add(3*time.Second).UnixMilli() {
			t.Fatalf("after attempt 2: %d calls, next %d; want 2 calls, next at +3s", rcv.calls.Load(), times.NextRetryMS)
		}
		b.clk.Advance(2 * time.Second)
		_ = p.RunOnce(ctx, b.clk.Now())
		drain(t, b.exec)

		e = b.executions(t, tm.ID)[0]
		as, err := b.store.ListAttempts(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status != dao.ExecSucceeded || e.Attempt != 3 || len(as) != 3 || rcv.calls.Load() != 3 {
			t.Fatalf("execution %+v, %d attempts, %d calls; want succeeded after exactly 3", e, len(as), rcv.calls.Load())
		}
		if attempts[0] != "1" || attempts[1] != "2" || attempts[2] != "3" {
			t.Fatalf("Tock-Attempt headers %v, want 1 2 3", attempts)
		}
		for i, want := range []int{503, 503, 200} {
			if as[i].HTTPStatus != want || as[i].Attempt != i+1 {
				t.Errorf("attempt %d: %+v, want status %d", i+1, as[i], want)
			}
		}
		if gap := as[1].StartedMS - as[0].FinishedMS; gap != 1000 {
			t.Errorf("gap before attempt 2 = %dms, want 1000", gap)
		}
		if gap := as[2].StartedMS - as[1].FinishedMS; gap != 2000 {
			t.Errorf("gap before attempt 3 = %dms, want 2000", gap)
		}
	})

	t.Run("AlwaysFailingEndsFailedAfterMaxAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{Jitter: identityJitter})
		rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTooManyRequests) })
		tm := b.withRetry(t, b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL}),
			dao.RetryPolicy{MaxAttempts: 3, BackoffMS: 1000, MaxBackoffMS: 1500})
		p := newPoller(t, b, "test-1")
		_ = b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()})
		for range 10 {
			b.clk.Advance(time.Second)
			_ = p.RunOnce(ctx, b.clk.Now())
			drain(t, b.exec)
		}
		e := b.executions(t, tm.ID)[0]
		as, _ := b.store.ListAttempts(ctx, e.ID)
		if e.Status != dao.ExecFailed || len(as) != 3 || rcv.calls.Load() != 3 || e.HTTPStatus != 429 {
			t.Fatalf("execution %+v, %d attempts, %d calls: want failed for good after 3", e, len(as), rcv.calls.Load())
		}
		// The second gap is capped by max_backoff (1.5s, not 2s).
		if gap := as[2].StartedMS - as[1].FinishedMS; gap > 2000 || gap < 1500 {
			t.Errorf("gap before attempt 3 = %dms, want 1.5s capped (polled each second: at most 2s)", gap)
		}
	})

	t.Run("BadRequestIsNotRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{Jitter: identityJitter})
		rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) })
		tm := b.withRetry(t, b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL}), dao.RetryPolicy{MaxAttempts: 5})
		res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()})
		e := b.executions(t, tm.ID)[0]
		if res.Outcome != executor.Failed || e.Status != dao.ExecFailed || rcv.calls.Load() != 1 {
			t.Fatalf("result %+v, execution %+v: want failed at once", res, e)
		}
	})

	t.Run("RetryOfDisabledTimerIsAbandoned", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{Jitter: identityJitter})
		rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		tm = b.withRetry(t, tm, dao.RetryPolicy{MaxAttempts: 3})
		_ = b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()})
		tm.Status = dao.StatusDisabled
		if _, err := b.store.UpdateTimer(ctx, tm, tm.Version, b.clk.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		b.clk.Advance(time.Second)
		_ = newPoller(t, b, "test-1").RunOnce(ctx, b.clk.Now())
		drain(t, b.exec)
		e := b.executions(t, tm.ID)[0]
		if e.Status != dao.ExecFailed || rcv.calls.Load() != 1 {
			t.Fatalf("execution %+v after %d calls: want failed (abandoned) without another call", e, rcv.calls.Load())
		}
	})
}

func TestBackoffCap(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 100: time.Minute} {
		if got := executor.BackoffCap(time.Second, time.Minute, n); got != want {
			t.Errorf("cap after attempt %d = %s, want %s", n, got, want)
		}
	}
	for code, want := range map[int]bool{400: false, 404: false, 408: true, 429: true, 500: true, 503: true, 302: false} {
		if executor.RetryableStatus(code) != want {
			t.Errorf("RetryableStatus(%d) = %v", code, !want)
		}
	}
}

// TestHeartbeatAndTakeover runs in virtual time: instance A holds an execution whose callback
// hangs and renews its lease; instance B finds nothing stale while A renews; once A stops
// renewing (frozen), B resets the execution after 3 missed beats, claims it and runs attempt
// 2; A's renewal then fails (CAS on the owner), so A's late result is not written.
func TestHeartbeatAndTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ds := daotest.SQLite(t)
	a := setup(t, ds, executor.Config{InstanceID: "A", HeartbeatInterval: 2 * time.Second})
	a.store = ds
	release := make(chan struct{})
	rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(executor.HeaderAttempt) == "1" {
			<-release
			w.WriteHeader(http.StatusOK)
		}
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	tm := a.createTimer(t, everySecond, dao.Callback{URL: rcv.URL, TimeoutMS: 60000})
	occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()}
	resA := make(chan executor.Result, 1)
	if err := a.exec.Submit(ctx, occ, func(r executor.Result) { resA <- r }); err != nil {
		t.Fatal(err)
	}
	for rcv.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	b := setup(t, ds, executor.Config{InstanceID: "B"})
	b.store = ds
	pb, err := executor.NewPoller(executor.PollerConfig{InstanceID: "B", HeartbeatInterval: 2 * time.Second, MissedBeats: 3,
		Clock: b.clk, Logger: slog.New(slog.DiscardHandler)}, ds, b.exec)
	if err != nil {
		t.Fatal(err)
	}
	// A renews every 2s up to +10s; B (same virtual time) finds nothing stale.
	for s := 2; s <= 10; s += 2 {
		a.clk.Advance(2 * time.Second)
		b.clk.Advance(2 * time.Second)
		a.exec.RenewLeases(ctx, a.clk.Now())
		if err := pb.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	e := a.executions(t, tm.ID)[0]
	times, _ := ds.GetExecutionTimes(ctx, e.ID)
	if e.Status != dao.ExecRunning || e.Owner != "A" || times.HeartbeatMS != t0.Add(10*time.Second).UnixMilli() {
		t.Fatalf("while A renews: %+v %+v; want running under A, renewed at +10s", e, times)
	}
	// A freezes. At +16s (6s = 3 beats since its last one) it is not stale yet; a
	// millisecond later it is.
	b.clk.Advance(6 * time.Second)
	_ = pb.RunOnce(ctx, b.clk.Now())
	if e := a.executions(t, tm.ID)[0]; e.Owner != "A" {
		t.Fatalf("taken over after exactly 3 beats: %+v", e)
	}
	b.clk.Advance(time.Millisecond)
	if err := pb.RunOnce(ctx, b.clk.Now()); err != nil {
		t.Fatal(err)
	}
	drain(t, b.exec)
	e = a.executions(t, tm.ID)[0]
	if e.Status != dao.ExecSucceeded || e.Owner != "B" || e.Attempt != 2 {
		t.Fatalf("after takeover: %+v; want succeeded by B as attempt 2", e)
	}
	// A wakes: its renewal finds B's ownership, and its result is not written.
	a.clk.Advance(6 * time.Second)
	a.exec.RenewLeases(ctx, a.clk.Now())
	close(release)
	if r := <-resA; r.Outcome != executor.Skipped {
		t.Fatalf("A's late result: %+v, want skipped (lost)", r)
	}
	e = a.executions(t, tm.ID)[0]
	as, _ := ds.ListAttempts(ctx, e.ID)
	if e.Owner != "B" || e.Status != dao.ExecSucceeded || len(as) != 1 || as[0].Owner != "B" || strconv.Itoa(as[0].Attempt) != "2" {
		t.Fatalf("final %+v, attempts %+v; want B's attempt 2 only", e, as)
	}
}
