package batch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/batch"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

// create makes a batch over ids and fails the test on error.
func create(t testing.TB, b *batch.Batch, op string, ids []int64) dao.BatchJob {
	t.Helper()
	j, existed, err := b.Create(context.Background(), batch.CreateParams{Operation: op, IDs: ids})
	if err != nil || existed {
		t.Fatalf("create %s batch: existed %v, err %v", op, existed, err)
	}
	return j
}

func timerIDs(ts []dao.Timer) []int64 {
	ids := make([]int64, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}

// A handler that overruns its timeout is canceled and the task retried, twice; the third
// timeout fails it. Virtual time: each timeout happens when the test advances the clock.
func TestHandlerTimeoutRetriedTwiceThenFails(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		r := newRunner(t, s, runnerOpts{cfg: batch.Config{Workers: 2}, noAPI: true})
		started := make(chan int64)
		var calls atomic.Int32
		if err := r.b.Register(batch.Op{Name: "slow", MaxDuration: 5 * time.Second, Run: func(ctx context.Context, w *batch.Work) error {
			calls.Add(1)
			started <- w.Task.ID
			<-ctx.Done()
			return ctx.Err()
		}}); err != nil {
			t.Fatal(err)
		}
		timers := seedTimers(t, s, "slow", 1)
		r.start(t)
		j := create(t, r.b, "slow", timerIDs(timers))
		for i := range 3 {
			select {
			case <-started:
			case <-time.After(waitBound):
				t.Fatalf("run %d did not start", i+1)
			}
			r.clock.Advance(5 * time.Second)
		}
		_, c := waitStatus(t, r.b, j.ID, dao.BatchFail)
		task := allTasks(t, s, j.ID)[0]
		if calls.Load() != 3 || task.Retry != 2 || task.Status != dao.TaskFail || c[dao.TaskFail] != 1 ||
			!strings.Contains(task.Error, "timed out after 5s") {
			t.Fatalf("calls %d, task %+v", calls.Load(), task)
		}
		if got := metric(t, r.reg, "tock_batch_tasks_total", map[string]string{"operation": "slow", "outcome": "retry"}); got != 2 {
			t.Errorf("retry outcomes = %v, want 2", got)
		}
	})
}

// Some timers fail for good, one fails transiently once and one handler panics: the batch
// ends partial_fail, every task with its error.
func TestPartialFailure(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		r := newRunner(t, s, runnerOpts{noAPI: true})
		timers := seedTimers(t, s, "partial", 10)
		ids := timerIDs(timers)
		var mu sync.Mutex
		runs := map[int64]int{}
		must(t, r.b.Register(batch.Op{Name: "flaky", MaxDuration: time.Second, Run: func(ctx context.Context, w *batch.Work) error {
			mu.Lock()
			runs[w.Task.TimerID]++
			n := runs[w.Task.TimerID]
			mu.Unlock()
			switch id := w.Task.TimerID; {
			case id == ids[0]:
				panic("handler bug")
			case id == ids[1] && n == 1:
				return errors.New("store hiccup") // transient: retried
			case id%2 == 0:
				return batch.Permanent(fmt.Errorf("timer %d refuses", id))
			}
			return nil
		}}))
		r.start(t)
		j := create(t, r.b, "flaky", ids)
		j, c := waitStatus(t, r.b, j.ID, dao.BatchPartialFail)
		if c[dao.TaskSuccess]+c[dao.TaskFail] != 10 || c[dao.TaskFail] == 0 || c[dao.TaskSuccess] == 0 {
			t.Fatalf("counts %v", c)
		}
		if j.StartedMS == 0 || j.FinishedMS == 0 {
			t.Fatalf("times not set: %+v", j)
		}
		for _, task := range allTasks(t, s, j.ID) {
			id := task.TimerID
			switch {
			case id == ids[0]:
				if task.Status != dao.TaskFail || !strings.Contains(task.Error, "panicked: handler bug") || task.Retry != 0 {
					t.Errorf("panicking task: %+v", task)
				}
			case id == ids[1]:
				want := dao.TaskSuccess
				if id%2 == 0 {
					want = dao.TaskFail
				}
				if task.Status != want || task.Retry != 1 || runs[id] != 2 {
					t.Errorf("transient task: %+v, runs %d", task, runs[id])
				}
			case id%2 == 0:
				if task.Status != dao.TaskFail || task.Error != fmt.Sprintf("timer %d refuses", id) || runs[id] != 1 {
					t.Errorf("failing task: %+v, runs %d", task, runs[id])
				}
			default:
				if task.Status != dao.TaskSuccess || task.Error != "" || runs[id] != 1 {
					t.Errorf("good task: %+v, runs %d", task, runs[id])
				}
			}
		}
		if got := metric(t, r.reg, "tock_batch_status_changes_total", map[string]string{"status": dao.BatchPartialFail}); got != 1 {
			t.Errorf("partial_fail status changes = %v", got)
		}
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Cancel mid-batch: the running tasks finish, no other task starts, the rest become cancel.
func TestCancelMidBatch(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		r := newRunner(t, s, runnerOpts{cfg: batch.Config{Workers: 3}, noAPI: true})
		gate := make(chan struct{})
		var started atomic.Int32
		must(t, r.b.Register(batch.Op{Name: "gated", MaxDuration: time.Hour, Run: func(ctx context.Context, w *batch.Work) error {
			started.Add(1)
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}))
		timers := seedTimers(t, s, "cancel", 20)
		r.start(t)
		j := create(t, r.b, "gated", timerIDs(timers))
		waitFor(t, "three tasks running", func() bool { return started.Load() == 3 })
		canceled, c, err := r.b.Cancel(context.Background(), j.ID)
		if err != nil || canceled.Status != dao.BatchCancel || c[dao.TaskCancel] != 17 || c[dao.TaskRunning] != 3 || batch.Finished(canceled) {
			t.Fatalf("Cancel = %+v, %v, %v", canceled, c, err)
		}
		close(gate)
		j, c = waitStatus(t, r.b, j.ID, dao.BatchCancel)
		if c[dao.TaskSuccess] != 3 || c[dao.TaskCancel] != 17 || started.Load() != 3 || j.FinishedMS == 0 {
			t.Fatalf("after cancel: %+v, counts %v, started %d", j, c, started.Load())
		}
		if _, _, err := r.b.Cancel(context.Background(), j.ID); !errors.Is(err, batch.ErrFinished) {
			t.Fatalf("second cancel = %v", err)
		}
	})
}

// A pool whose every worker is stuck in a handler that ignores its context stops taking
// tasks; after StalledScans scans without progress the dispatcher and pool restart, and the
// stuck claim comes back through its deadline.
func TestStalledPoolRestarts(t *testing.T) {
	t.Parallel()
	s := daotest.SQLite(t)
	r := newRunner(t, s, runnerOpts{cfg: batch.Config{Workers: 1, QueueSize: 2, StalledScans: 2}, noAPI: true})
	stuck := make(chan struct{})
	release := make(chan struct{})
	var runs atomic.Int32
	must(t, r.b.Register(batch.Op{Name: "sticky", MaxDuration: time.Second, Run: func(ctx context.Context, w *batch.Work) error {
		if runs.Add(1) == 1 {
			close(stuck)
			<-release // ignores ctx: the bug the restart is for
		}
		return nil
	}}))
	timers := seedTimers(t, s, "stall", 4)
	r.start(t)
	j := create(t, r.b, "sticky", timerIDs(timers))
	<-stuck
	ctx := context.Background()
	waitFor(t, "the queue to fill", func() bool {
		_, _ = r.b.Dispatch(ctx)
		return metric(t, r.reg, "tock_batch_queue_length", nil) == 2
	})
	for range 3 { // the first scan sets the baseline
		must(t, r.b.Scan(ctx, r.clock.Now()))
	}
	if got := metric(t, r.reg, "tock_batch_dispatcher_restarts_total", nil); got != 1 {
		t.Fatalf("restarts = %v, want 1", got)
	}
	if !strings.Contains(r.logs.String(), "dispatcher restarted") {
		t.Errorf("restart not logged:\n%s", r.logs.String())
	}
	// The new pool runs the other three; the stuck one is still claimed.
	waitBatch(t, r.b, j.ID, "three done", func(_ dao.BatchJob, c batch.Counts) bool { return c[dao.TaskSuccess] == 3 })
	close(release)
	// Its run was aborted by the restart; the claim's deadline (1s + 10s grace) brings it back.
	r.clock.Advance(12 * time.Second)
	must(t, r.b.Scan(ctx, r.clock.Now()))
	_, c := waitStatus(t, r.b, j.ID, dao.BatchSuccess)
	if c[dao.TaskSuccess] != 4 || runs.Load() != 5 {
		t.Fatalf("counts %v, runs %d", c, runs.Load())
	}
	if got := metric(t, r.reg, "tock_batch_tasks_taken_back_total", nil); got != 1 {
		t.Errorf("taken back = %v", got)
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	s := daotest.SQLite(t)
	t.Run("StopBeforeStartAndTwice", func(t *testing.T) {
		r := newRunner(t, s, runnerOpts{noAPI: true})
		r.b.Stop()
		r.b.Stop()
		if err := r.b.Start(context.Background()); err == nil {
			t.Fatal("Start after Stop succeeded")
		}
	})
	t.Run("StartTwiceFails", func(t *testing.T) {
		r := newRunner(t, s, runnerOpts{noAPI: true})
		r.start(t)
		if err := r.b.Start(context.Background()); err == nil {
			t.Fatal("second Start succeeded")
		}
		if got := metric(t, r.reg, "tock_batch_workers", nil); got != 32 {
			t.Fatalf("workers gauge = %v", got)
		}
		r.b.Stop()
		r.b.Stop()
		if got := metric(t, r.reg, "tock_batch_workers", nil); got != 0 {
			t.Fatalf("workers gauge after stop = %v", got)
		}
	})
	t.Run("StopLetsRunningTasksFinish", func(t *testing.T) {
		r := newRunner(t, s, runnerOpts{cfg: batch.Config{Workers: 1}, noAPI: true})
		in, out := make(chan struct{}), make(chan struct{})
		must(t, r.b.Register(batch.Op{Name: "stoppable", MaxDuration: time.Hour, Run: func(ctx context.Context, w *batch.Work) error {
			if w.Task.TimerID%2 == 1 {
				close(in)
				<-out
			}
			return nil
		}}))
		timers := seedTimers(t, s, "stop", 2)
		r.start(t)
		j := create(t, r.b, "stoppable", timerIDs(timers))
		<-in
		stopped := make(chan struct{})
		go func() { r.b.Stop(); close(stopped) }()
		select {
		case <-stopped:
			t.Fatal("Stop returned while a task was running")
		case <-time.After(50 * time.Millisecond):
		}
		close(out)
		<-stopped
		_, c, err := r.b.Get(context.Background(), j.ID)
		if err != nil || c[dao.TaskSuccess] < 1 || c[dao.TaskRunning] != 0 {
			t.Fatalf("after a graceful stop: %v, %v", c, err)
		}
	})
	t.Run("RegisterRefusesDuplicatesAndBadHandlers", func(t *testing.T) {
		r := newRunner(t, s, runnerOpts{noAPI: true})
		ok := batch.Op{Name: "x", MaxDuration: time.Second, Run: func(context.Context, *batch.Work) error { return nil }}
		must(t, r.b.Register(ok))
		for _, h := range []batch.Op{ok, {Name: "", MaxDuration: time.Second}, {Name: "y"}} {
			if err := r.b.Register(h); err == nil {
				t.Errorf("Register(%+v) succeeded", h)
			}
		}
	})
	t.Run("NewRejectsBadConfig", func(t *testing.T) {
		if _, err := batch.New(batch.Config{Workers: -1}, batch.Deps{Store: s, Clock: clockwork.NewFakeClock()}); err == nil {
			t.Fatal("negative workers accepted")
		}
		if _, err := batch.New(batch.Config{}, batch.Deps{}); err == nil {
			t.Fatal("missing deps accepted")
		}
	})
}

// Create's own checks, below the API's.
func TestCreateErrors(t *testing.T) {
	t.Parallel()
	s := daotest.SQLite(t)
	r := newRunner(t, s, runnerOpts{cfg: batch.Config{MaxTargets: 5}, noAPI: true})
	must(t, r.b.Register(batch.Op{Name: "noop", MaxDuration: time.Second, Run: func(context.Context, *batch.Work) error { return nil }}))
	timers := seedTimers(t, s, "create", 7)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		p    batch.CreateParams
		want error
	}{
		{"UnknownOperation", batch.CreateParams{Operation: "nope", IDs: []int64{timers[0].ID}}, batch.ErrUnknownOperation},
		{"ParamsNotTaken", batch.CreateParams{Operation: "noop", IDs: []int64{timers[0].ID}, Params: json.RawMessage(`{}`)}, batch.ErrInvalidParams},
		{"NoTarget", batch.CreateParams{Operation: "noop"}, batch.ErrEmptyTarget},
		{"EmptyIDs", batch.CreateParams{Operation: "noop", IDs: []int64{}}, batch.ErrEmptyTarget},
		{"UnknownIDs", batch.CreateParams{Operation: "noop", IDs: []int64{timers[0].ID, 999999}}, batch.ErrUnknownTimers},
		{"TooManyIDs", batch.CreateParams{Operation: "noop", IDs: timerIDs(timers)}, batch.ErrTooManyTargets},
		{"NoMatch", batch.CreateParams{Operation: "noop", Selector: &dao.TimerSelector{App: "create", NamePrefix: "zz"}}, batch.ErrNoMatch},
		{"SelectorTooWide", batch.CreateParams{Operation: "noop", Selector: &dao.TimerSelector{App: "create"}}, batch.ErrTooManyTargets},
	} {
		if _, _, err := r.b.Create(ctx, c.p); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	if js, _ := r.b.List(ctx, dao.ListBatchesParams{}); len(js) != 0 {
		t.Fatalf("refused creates left batches: %+v", js)
	}
	t.Run("IdempotentCreate", func(t *testing.T) {
		p := batch.CreateParams{Operation: "noop", IDs: []int64{timers[1].ID, timers[0].ID, timers[0].ID}, RequestID: "k1"}
		first, existed, err := r.b.Create(ctx, p)
		if err != nil || existed || first.Total != 2 || first.App != "create" {
			t.Fatalf("first = %+v, %v, %v", first, existed, err)
		}
		p.IDs = []int64{timers[0].ID, timers[1].ID} // the same set, another order
		again, existed, err := r.b.Create(ctx, p)
		if err != nil || !existed || again.ID != first.ID {
			t.Fatalf("replay = %+v, %v, %v", again, existed, err)
		}
		p.IDs = []int64{timers[0].ID}
		if _, _, err := r.b.Create(ctx, p); !errors.Is(err, batch.ErrIdempotency) {
			t.Fatalf("other request under the key: %v", err)
		}
	})
}
