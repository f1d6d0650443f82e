package executor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/schedule"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

type testBundle struct {
	store *dao.Store
	clk   *clockwork.FakeClock
	exec  *executor.Executor
}

func setup(t *testing.T, store executor.Store, cfg executor.Config) *testBundle {
	t.Helper()
	clk := clockwork.NewFakeClockAt(t0)
	if cfg.InstanceID == "" {
		cfg.InstanceID = "test-1"
	}
	if cfg.ResponseExcerptBytes == 0 {
		cfg.ResponseExcerptBytes = 1024
	}
	cfg.Clock = clk
	cfg.Logger = slog.New(slog.DiscardHandler)
	var ds *dao.Store
	if store == nil {
		ds = daotest.SQLite(t)
		store = ds
	}
	e, err := executor.New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return &testBundle{store: ds, clk: clk, exec: e}
}

// createTimer stores an enabled timer firing every second from t0 with the given callback.
func (b *testBundle) createTimer(t *testing.T, spec schedule.Spec, cb dao.Callback) dao.Timer {
	t.Helper()
	if cb.Method == "" {
		cb.Method = http.MethodPost
	}
	tm, _, err := b.store.CreateTimer(context.Background(), dao.Timer{
		App: "test", Name: t.Name() + "-" + time.Now().Format("150405.000000000"), Status: dao.StatusEnabled,
		Schedule: dao.JSONSpec(spec), AnchorMS: t0.UnixMilli(), Callback: cb,
		// One attempt: these tests look at a single call; retries are in retry_test.go.
		Retry: dao.RetryPolicy{MaxAttempts: 1},
	}, b.clk.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func (b *testBundle) executions(t *testing.T, timerID int64) []dao.Execution {
	t.Helper()
	es, err := b.store.ListExecutions(context.Background(), dao.ListExecutionsParams{TimerID: timerID})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

var everySecond = schedule.Spec{Every: "1s"}

// receiver records requests and answers with handle.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []*http.Request
	body  []string
	calls atomic.Int64
}

func newReceiver(t *testing.T, handle http.HandlerFunc) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, req)
		r.body = append(r.body, string(b))
		r.mu.Unlock()
		r.calls.Add(1)
		if handle != nil {
			handle(w, req)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func TestExecute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CallsWithTimerRequestAndTockHeaders", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{})
		rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, "queued")
		})
		body := `{"hello": "world" }` + "\n"
		tm := b.createTimer(t, everySecond, dao.Callback{
			URL: rcv.URL + "/hook?x=1", Method: http.MethodPut, Body: body, TimeoutMS: 2000,
			Headers: map[string]string{"X-Custom": "v1", "Content-Type": "application/json", "Tock-Timer-Id": "spoofed"},
		})
		occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(3 * time.Second).UnixMilli()}
		res := b.exec.Execute(ctx, occ)
		if res.Outcome != executor.Succeeded || res.HTTPStatus != http.StatusAccepted {
			t.Fatalf("result = %+v, want succeeded 202", res)
		}
		if rcv.calls.Load() != 1 {
			t.Fatalf("receiver called %d times, want 1", rcv.calls.Load())
		}
		req := rcv.reqs[0]
		if req.Method != http.MethodPut || req.URL.String() != "/hook?x=1" {
			t.Errorf("request %s %s, want PUT /hook?x=1", req.Method, req.URL)
		}
		if rcv.body[0] != body {
			t.Errorf("body %q, want verbatim %q", rcv.body[0], body)
		}
		want := map[string]string{
			"X-Custom":          "v1",
			"Content-Type":      "application/json",
			"Tock-Timer-Id":     strconv.FormatInt(tm.ID, 10),
			"Tock-Scheduled-At": "2026-11-21T09:00:03.000Z",
			"Tock-Attempt":      "1",
			"Idempotency-Key":   dao.Key(tm.ID, occ.ScheduledMS),
		}
		for k, v := range want {
			if got := req.Header.Values(k); len(got) != 1 || got[0] != v {
				t.Errorf("header %s = %q, want exactly [%q]", k, got, v)
			}
		}
		es := b.executions(t, tm.ID)
		if len(es) != 1 {
			t.Fatalf("%d executions, want 1", len(es))
		}
		e := es[0]
		if e.Status != dao.ExecSucceeded || e.HTTPStatus != 202 || e.Response != "queued" || e.Attempt != 1 ||
			e.ScheduledMS != occ.ScheduledMS || e.Owner != "test-1" || e.TimerVersion != tm.Version || e.FinishedMS != t0.UnixMilli() {
			t.Fatalf("execution %+v", e)
		}
	})

	t.Run("Non2xxIsFailedWithBoundedExcerpt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{ResponseExcerptBytes: 10})
		rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, strings.Repeat("x", 100000))
		})
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()})
		if res.Outcome != executor.Failed || res.HTTPStatus != 500 {
			t.Fatalf("result = %+v, want failed 500", res)
		}
		e := b.executions(t, tm.ID)[0]
		if e.Status != dao.ExecFailed || e.HTTPStatus != 500 || e.Response != strings.Repeat("x", 10) || !strings.Contains(e.Error, "500") {
			t.Fatalf("execution %+v", e)
		}
	})

	t.Run("RedirectIsFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{})
		rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		})
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()})
		if res.Outcome != executor.Failed || res.HTTPStatus != 302 || rcv.calls.Load() != 1 {
			t.Fatalf("result = %+v after %d calls, want failed 302 without following", res, rcv.calls.Load())
		}
	})

	t.Run("TimeoutIsFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{})
		release := make(chan struct{})
		rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		defer close(release)
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL, TimeoutMS: 100})
		start := time.Now()
		res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()})
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("a 100ms callback timeout took %s", took)
		}
		e := b.executions(t, tm.ID)[0]
		if res.Outcome != executor.Failed || e.Status != dao.ExecFailed || e.HTTPStatus != 0 || !strings.Contains(e.Error, "timeout") {
			t.Fatalf("result %+v, execution %+v: want failed with a timeout error", res, e)
		}
	})

	t.Run("ConnectionRefusedIsFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		tm := b.createTimer(t, everySecond, dao.Callback{URL: "http://" + addr + "/x"})
		res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()})
		e := b.executions(t, tm.ID)[0]
		if res.Outcome != executor.Failed || e.Status != dao.ExecFailed || !strings.Contains(e.Error, "refused") {
			t.Fatalf("result %+v, execution %+v: want failed, connection refused", res, e)
		}
	})

	t.Run("DuplicateOccurrenceNeverCalledTwice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{})
		rcv := newReceiver(t, nil)
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(5 * time.Second).UnixMilli()}
		var wg sync.WaitGroup
		outcomes := make(chan executor.Outcome, 10)
		for range 10 {
			wg.Go(func() { outcomes <- b.exec.Execute(ctx, occ).Outcome })
		}
		wg.Wait()
		close(outcomes)
		n := map[executor.Outcome]int{}
		for o := range outcomes {
			n[o]++
		}
		if n[executor.Succeeded] != 1 || n[executor.Skipped] != 9 || rcv.calls.Load() != 1 {
			t.Fatalf("outcomes %v, %d calls: want 1 succeeded, 9 skipped, 1 call", n, rcv.calls.Load())
		}
		// Also after a failure: a recorded occurrence is settled.
		if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Skipped || rcv.calls.Load() != 1 {
			t.Fatalf("re-run: %+v, %d calls", res, rcv.calls.Load())
		}
	})

	t.Run("OneShotCompleted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{})
		rcv := newReceiver(t, nil)
		at := t0.Add(1500 * time.Millisecond)
		tm := b.createTimer(t, schedule.Spec{At: schedule.FormatTime(at)}, dao.Callback{URL: rcv.URL})
		if res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: at.Add(time.Second).UnixMilli()}); res.Outcome != executor.Skipped {
			t.Fatalf("a time other than at: %+v, want skipped", res)
		}
		if res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: at.UnixMilli()}); res.Outcome != executor.Succeeded {
			t.Fatalf("at: %+v, want succeeded", res)
		}
		got, err := b.store.GetTimer(ctx, tm.ID)
		if err != nil || got.Status != dao.StatusCompleted {
			t.Fatalf("timer after its one-shot: %+v, %v; want completed", got, err)
		}
		if rcv.calls.Load() != 1 {
			t.Fatalf("%d calls, want 1", rcv.calls.Load())
		}
	})

	t.Run("SkipsWhatTheTimerNoLongerHas", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{})
		rcv := newReceiver(t, nil)
		due := t0.Add(4 * time.Second).UnixMilli()

		disabled := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		disabled.Status = dao.StatusDisabled
		if _, err := b.store.UpdateTimer(ctx, disabled, disabled.Version, t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		deleted := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		if err := b.store.DeleteTimer(ctx, deleted.ID, t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		changed := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		changed.Schedule = dao.JSONSpec(schedule.Spec{Every: "3s"})
		if _, err := b.store.UpdateTimer(ctx, changed, changed.Version, t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		notOnSchedule := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})

		for name, occ := range map[string]executor.Occurrence{
			"disabled":          {TimerID: disabled.ID, ScheduledMS: due},
			"deleted":           {TimerID: deleted.ID, ScheduledMS: due},
			"rescheduled":       {TimerID: changed.ID, ScheduledMS: due}, // 4s is not on the 3s schedule
			"between seconds":   {TimerID: notOnSchedule.ID, ScheduledMS: due + 500},
			"never existed":     {TimerID: 999999, ScheduledMS: due},
			"before first (t0)": {TimerID: notOnSchedule.ID, ScheduledMS: t0.UnixMilli() - 1000},
		} {
			if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Skipped {
				t.Errorf("%s: %+v, want skipped", name, res)
			}
		}
		if rcv.calls.Load() != 0 {
			t.Fatalf("%d calls, want none", rcv.calls.Load())
		}
		if res := b.exec.Execute(ctx, executor.Occurrence{TimerID: changed.ID, ScheduledMS: t0.Add(3 * time.Second).UnixMilli()}); res.Outcome != executor.Succeeded {
			t.Fatalf("occurrence of the new schedule: %+v, want succeeded", res)
		}
	})

	for _, ungrouped := range []bool{false, true} {
		t.Run(fmt.Sprint("StoreFailureIsUnrecorded/ungrouped=", ungrouped), func(t *testing.T) {
			t.Parallel()
			ds := daotest.SQLite(t)
			fs := &failingStore{Store: ds}
			b := setup(t, fs, executor.Config{ResultWriteTimeout: 50 * time.Millisecond, Ungrouped: ungrouped})
			b.store = ds
			rcv := newReceiver(t, nil)
			tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
			occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()}

			fs.failClaim.Store(true)
			if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Unrecorded || res.Recorded() || res.Err == nil {
				t.Fatalf("claim failing: %+v, want unrecorded", res)
			}
			fs.failClaim.Store(false)
			fs.failFinish.Store(true)
			if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Unrecorded {
				t.Fatalf("finish failing: %+v, want unrecorded", res)
			}
			fs.failFinish.Store(false)
			if rcv.calls.Load() != 1 {
				t.Fatalf("%d calls, want 1 (claim failed before the call, finish after it)", rcv.calls.Load())
			}
			// The row is left running by this instance: the next try adopts it, calls again
			// (at least once) and records the result.
			if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Succeeded {
				t.Fatalf("retry after a lost result: %+v, want succeeded", res)
			}
			if e := b.executions(t, tm.ID); len(e) != 1 || e[0].Status != dao.ExecSucceeded || rcv.calls.Load() != 2 {
				t.Fatalf("executions %+v, %d calls: want one succeeded execution after 2 calls", e, rcv.calls.Load())
			}
		})

		t.Run(fmt.Sprint("LostClaimAnswerIsAdoptedByItsOwner/ungrouped=", ungrouped), func(t *testing.T) {
			t.Parallel()
			ds := daotest.SQLite(t)
			fs := &failingStore{Store: ds}
			b := setup(t, fs, executor.Config{Ungrouped: ungrouped})
			b.store = ds
			rcv := newReceiver(t, nil)
			tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
			occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()}
			fs.loseClaimAnswer.Store(true)
			if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Unrecorded {
				t.Fatalf("claim answer lost: %+v, want unrecorded", res)
			}
			fs.loseClaimAnswer.Store(false)
			if res := b.exec.Execute(ctx, occ); res.Outcome != executor.Succeeded || rcv.calls.Load() != 1 {
				t.Fatalf("second try: %+v after %d calls, want succeeded after 1 call", res, rcv.calls.Load())
			}
			// Another instance must not adopt it: that is the takeover's job, with heartbeats.
			other := setup(t, ds, executor.Config{InstanceID: "test-2"})
			occ2 := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(2 * time.Second).UnixMilli()}
			fs.loseClaimAnswer.Store(true)
			_ = b.exec.Execute(ctx, occ2)
			fs.loseClaimAnswer.Store(false)
			if res := other.exec.Execute(ctx, occ2); res.Outcome != executor.Skipped || rcv.calls.Load() != 1 {
				t.Fatalf("other instance: %+v after %d calls, want skipped and no call", res, rcv.calls.Load())
			}
		})
	}

	t.Run("PanicInCallbackIsRecordedFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{Transport: panicTransport{}})
		tm := b.createTimer(t, everySecond, dao.Callback{URL: "http://example.invalid/"})
		res := b.exec.Execute(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()})
		e := b.executions(t, tm.ID)[0]
		if res.Outcome != executor.Failed || e.Status != dao.ExecFailed || !strings.Contains(e.Error, "panic: boom") {
			t.Fatalf("result %+v, execution %+v: want a recorded failure naming the panic", res, e)
		}
	})
}

func TestSubmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("BoundsConcurrencyToPoolSize", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{PoolSize: 2})
		var running, peak atomic.Int64
		gate := make(chan struct{})
		rcv := newReceiver(t, func(http.ResponseWriter, *http.Request) {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-gate
			running.Add(-1)
		})
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		results := make(chan executor.Result, 6)
		submitted := make(chan struct{})
		go func() {
			defer close(submitted)
			for i := 1; i <= 6; i++ {
				occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Duration(i) * time.Second).UnixMilli()}
				if err := b.exec.Submit(ctx, occ, func(r executor.Result) { results <- r }); err != nil {
					t.Error(err)
				}
			}
		}()
		// Let the calls through one by one once two are running.
		for rcv.calls.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		for range 6 {
			gate <- struct{}{}
		}
		<-submitted
		for range 6 {
			if r := <-results; r.Outcome != executor.Succeeded {
				t.Errorf("result %+v", r)
			}
		}
		if peak.Load() != 2 {
			t.Fatalf("peak concurrency %d, want 2 (pool size)", peak.Load())
		}
	})

	t.Run("SubmitWaitsForCtxWhenFull", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{PoolSize: 1})
		gate := make(chan struct{})
		rcv := newReceiver(t, func(http.ResponseWriter, *http.Request) { <-gate })
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		done := make(chan executor.Result, 1)
		if err := b.exec.Submit(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()}, func(r executor.Result) { done <- r }); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := b.exec.Submit(cctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(2 * time.Second).UnixMilli()}, func(executor.Result) { t.Error("done called for a refused submit") })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Submit on a full pool with a cancelled ctx: %v, want context.Canceled", err)
		}
		close(gate)
		<-done
	})

	t.Run("StopWaitsThenRefuses", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{})
		rcv := newReceiver(t, func(http.ResponseWriter, *http.Request) { time.Sleep(50 * time.Millisecond) })
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
		var finished atomic.Int64
		for i := 1; i <= 5; i++ {
			occ := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Duration(i) * time.Second).UnixMilli()}
			if err := b.exec.Submit(ctx, occ, func(executor.Result) { finished.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
		b.exec.Stop()
		if finished.Load() != 5 || b.exec.InFlight() != 0 {
			t.Fatalf("after Stop: %d finished, %d in flight; want 5, 0", finished.Load(), b.exec.InFlight())
		}
		err := b.exec.Submit(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.UnixMilli()}, func(executor.Result) {})
		if !errors.Is(err, executor.ErrStopped) {
			t.Fatalf("Submit after Stop: %v, want ErrStopped", err)
		}
		b.exec.Stop() // idempotent
	})

	t.Run("StopCancelsCallbacksAfterTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, executor.Config{StopTimeout: 100 * time.Millisecond})
		rcv := newReceiver(t, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL, TimeoutMS: 60000})
		res := make(chan executor.Result, 1)
		if err := b.exec.Submit(ctx, executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()}, func(r executor.Result) { res <- r }); err != nil {
			t.Fatal(err)
		}
		for rcv.calls.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		start := time.Now()
		b.exec.Stop()
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("Stop took %s with a 100ms stop timeout", took)
		}
		if r := <-res; r.Outcome != executor.Retrying {
			t.Fatalf("cancelled callback: %+v, want handed back (retrying)", r)
		}
		// Handed back: pending, due at once, without owner, for another instance.
		if e := b.executions(t, tm.ID)[0]; e.Status != dao.ExecPending || e.Owner != "" {
			t.Fatalf("execution %+v, want pending without owner", e)
		}
	})
}

type failingStore struct {
	*dao.Store
	failClaim, failFinish atomic.Bool
	loseClaimAnswer       atomic.Bool // the claim commits, its answer is lost
}

var errDown = errors.New("store down")

func (f *failingStore) ClaimExecution(ctx context.Context, p dao.ClaimParams) (dao.Execution, bool, error) {
	if f.failClaim.Load() {
		return dao.Execution{}, false, errDown
	}
	if f.loseClaimAnswer.Load() {
		_, _, _ = f.Store.ClaimExecution(ctx, p)
		return dao.Execution{}, false, errDown
	}
	return f.Store.ClaimExecution(ctx, p)
}

func (f *failingStore) RecordAttempt(ctx context.Context, p dao.RecordAttemptParams) error {
	if f.failFinish.Load() {
		return errDown
	}
	return f.Store.RecordAttempt(ctx, p)
}

// The group writes fail alike, so both the grouped and the one-by-one paths are tested.
func (f *failingStore) ClaimExecutions(ctx context.Context, ps []dao.ClaimParams) ([]dao.ClaimResult, error) {
	if f.failClaim.Load() {
		return nil, errDown
	}
	if f.loseClaimAnswer.Load() {
		_, _ = f.Store.ClaimExecutions(ctx, ps)
		return nil, errDown
	}
	return f.Store.ClaimExecutions(ctx, ps)
}

func (f *failingStore) RecordAttempts(ctx context.Context, ps []dao.RecordAttemptParams) ([]error, error) {
	if f.failFinish.Load() {
		return nil, errDown
	}
	return f.Store.RecordAttempts(ctx, ps)
}

type panicTransport struct{}

func (panicTransport) RoundTrip(*http.Request) (*http.Response, error) { panic("boom") }
