package batch_test

// The proofs of issue 6, run with the API's timer operations on SQLite and MariaDB.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/api"
	"github.com/tockd/tock/batch"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

// A 10,000-timer disable batch completes with every timer disabled and each changed exactly
// once; the rollback then restores every timer's exact previous content. Real clock: the
// times logged (and stored in the batch) are what it took.
func TestProofDisable10000ThenRollback(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		n := 10_000
		if raceEnabled && s.Dialect() == dao.DialectSQLite {
			n = 2_000 // the proof is on MariaDB; SQLite under -race is several times slower
		}
		ctx := context.Background()
		before := seedTimers(t, s, "bulk", n)
		if len(before) != n {
			t.Fatalf("seeded %d timers", len(before))
		}
		r := newRunner(t, s, runnerOpts{realClock: true}) // real clock: the timings are real
		r.start(t)

		start := time.Now()
		j, _, err := r.b.Create(ctx, batch.CreateParams{Operation: "disable", Selector: &dao.TimerSelector{App: "bulk"}})
		if err != nil {
			t.Fatal(err)
		}
		j, c := waitStatus(t, r.b, j.ID, dao.BatchSuccess)
		elapsed := time.Since(start)
		t.Logf("%s: disable batch of %d timers: %s (wall), batch duration_ms %d; counts %v",
			s.Dialect()+raceNote(), n, elapsed.Round(time.Millisecond), j.FinishedMS-j.CreatedMS, nonZero(c))
		if c[dao.TaskSuccess] != n || j.Total != n {
			t.Fatalf("counts %v", c)
		}
		after := appTimers(t, s, "bulk")
		for i, tm := range after {
			was := before[i]
			wantVersion := was.Version + 1
			if was.Status == dao.StatusDisabled {
				wantVersion = was.Version // already disabled: left alone
			}
			if tm.Status != dao.StatusDisabled || tm.Version != wantVersion {
				t.Fatalf("timer %d after the batch: status %s version %d, want disabled version %d", tm.ID, tm.Status, tm.Version, wantVersion)
			}
			calls := r.hook.of(tm.ID)
			if (was.Status == dao.StatusEnabled) != (len(calls) == 1) || len(calls) > 1 {
				t.Fatalf("timer %d (%s before): engine told %d times", tm.ID, was.Status, len(calls))
			}
		}

		start = time.Now()
		if _, _, err := r.b.Rollback(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		j, c = waitStatus(t, r.b, j.ID, dao.BatchRollbackSuccess)
		t.Logf("%s: rollback of %d tasks: %s (wall), rollback_duration_ms %d; counts %v",
			s.Dialect()+raceNote(), n, time.Since(start).Round(time.Millisecond), j.RollbackFinishedMS-j.RollbackStartedMS, nonZero(c))
		if c[dao.TaskRollbackSuccess] != n {
			t.Fatalf("counts after rollback %v", c)
		}
		restored := appTimers(t, s, "bulk")
		for i, tm := range restored {
			was := before[i]
			if tm.ID != was.ID || tm.Status != was.Status || !dao.TimerContentEqual(tm, was) {
				t.Fatalf("timer %d not restored:\n got %+v\nwant %+v", tm.ID, tm, was)
			}
			if was.Status == dao.StatusEnabled && (tm.Version != was.Version+2 || len(r.hook.of(tm.ID)) != 2) {
				t.Fatalf("timer %d: version %d, engine told %d times", tm.ID, tm.Version, len(r.hook.of(tm.ID)))
			}
		}
		if !raceEnabled && elapsed > time.Minute {
			t.Errorf("the batch took %s; aim is under 10s", elapsed)
		}
	})
}

func raceNote() string {
	if raceEnabled {
		return " (race detector on)"
	}
	return ""
}

func nonZero(c batch.Counts) map[string]int {
	out := map[string]int{}
	for k, v := range c {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// Two instances run the same batch at once: every timer is changed exactly once and the
// engine told once, and both instances did part of the work.
func TestProofTwoInstancesDoEachTaskOnce(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		n := 2000
		if raceEnabled && s.Dialect() == dao.DialectSQLite {
			n = 500
		}
		ctx := context.Background()
		before := seedTimers(t, s, "shared", n)
		hook := newCountingHook()
		clock := clockwork.NewFakeClockAt(t0)
		cfg := batch.Config{Workers: 8, QueueSize: 100}
		a := newRunner(t, s, runnerOpts{cfg: cfg, instance: "node-a", clock: clock, hook: hook})
		b := newRunner(t, s, runnerOpts{cfg: cfg, instance: "node-b", clock: clock, hook: hook})
		j, _, err := a.b.Create(ctx, batch.CreateParams{Operation: "disable", Selector: &dao.TimerSelector{App: "shared", Status: dao.StatusEnabled}})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, r := range []*runner{a, b} {
			wg.Go(func() { r.start(t) })
		}
		wg.Wait()
		waitStatus(t, a.b, j.ID, dao.BatchSuccess)

		byOwner := map[string]int{}
		for _, task := range allTasks(t, s, j.ID) {
			byOwner[task.Owner]++
			if task.Status != dao.TaskSuccess || task.Retry != 0 {
				t.Fatalf("task %+v", task)
			}
		}
		after := appTimers(t, s, "shared")
		changed := 0
		for i, tm := range after {
			if before[i].Status != dao.StatusEnabled {
				continue
			}
			changed++
			if tm.Status != dao.StatusDisabled || tm.Version != before[i].Version+1 || len(hook.of(tm.ID)) != 1 {
				t.Fatalf("timer %d: %s version %d, engine told %d times", tm.ID, tm.Status, tm.Version, len(hook.of(tm.ID)))
			}
		}
		lost := metric(t, a.reg, "tock_batch_tasks_total", map[string]string{"outcome": "lost"}) +
			metric(t, b.reg, "tock_batch_tasks_total", map[string]string{"outcome": "lost"})
		t.Logf("%s: %d tasks by instance %v; claims lost to the other instance: %v", s.Dialect(), changed, byOwner, lost)
		if byOwner["node-a"] == 0 || byOwner["node-b"] == 0 || hook.total() != changed {
			t.Fatalf("tasks by instance %v, engine calls %d for %d timers", byOwner, hook.total(), changed)
		}
	})
}

// An instance dies mid-batch (its context canceled with claims in flight, some of them after
// the timer was written and before the outcome was), like kill -9. A restart with the same
// instance id takes its claims back at once; another instance takes them back once their
// deadline passes. Either way the batch completes and no timer is written twice.
func TestProofRestartMidBatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		instance2 string
	}{{"SameInstanceTakesBackAtStart", "node-1"}, {"OtherInstanceTakesBackAfterDeadline", "node-2"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
				const n = 300
				ctx := context.Background()
				app := "restart"
				before := seedTimers(t, s, app, n)
				clock := clockwork.NewFakeClockAt(t0)
				killed := make(chan struct{})
				hook := &dyingHook{countingHook: newCountingHook(), after: 20, killed: killed, blocked: make(chan int64, 64)}
				first := newRunner(t, s, runnerOpts{cfg: batch.Config{Workers: 8}, instance: "node-1", clock: clock,
					hook: hook.countingHook, engine: hook})
				j, _, err := first.b.Create(ctx, batch.CreateParams{Operation: "disable", Selector: &dao.TimerSelector{App: app, Status: dao.StatusEnabled}})
				if err != nil {
					t.Fatal(err)
				}
				kill := first.start(t)
				// Wait until several workers wrote their timer and hang before recording it.
				inFlight := map[int64]bool{}
				for len(inFlight) < 4 {
					select {
					case id := <-hook.blocked:
						inFlight[id] = true
					case <-time.After(waitBound):
						t.Fatal("workers did not reach the engine hook")
					}
				}
				kill() // kill -9
				close(killed)
				first.b.Stop()
				_, mid, _ := first.b.Get(ctx, j.ID)
				if mid[dao.TaskRunning] == 0 || mid[dao.TaskPending] == 0 {
					t.Fatalf("not mid-batch when killed: %v", mid)
				}
				t.Logf("%s: killed with %v", s.Dialect(), nonZero(mid))

				hook2 := newCountingHook()
				second := newRunner(t, s, runnerOpts{cfg: batch.Config{Workers: 8}, instance: c.instance2, clock: clock, hook: hook2})
				second.start(t)
				if c.instance2 != "node-1" {
					// The dead claims wait for their deadline: handler timeout + lease grace.
					waitBatch(t, second.b, j.ID, "the rest done", func(_ dao.BatchJob, c batch.Counts) bool {
						return c[dao.TaskPending] == 0 && c[dao.TaskRunning] == mid[dao.TaskRunning]
					})
					clock.Advance(api.BatchTaskTimeout + batch.DefaultLeaseGrace + time.Second)
					must(t, second.b.Scan(ctx, clock.Now()))
				}
				_, end := waitStatus(t, second.b, j.ID, dao.BatchSuccess)
				if end[dao.TaskSuccess] != j.Total {
					t.Fatalf("counts %v", end)
				}
				retried := 0
				for _, task := range allTasks(t, s, j.ID) {
					if task.Retry > 0 {
						retried++
					}
					if inFlight[task.TimerID] && (task.Retry != 1 || task.Owner != c.instance2) {
						t.Errorf("task of a timer written before the kill: %+v", task)
					}
				}
				if retried != mid[dao.TaskRunning] {
					t.Errorf("%d tasks retried, %d were running at the kill", retried, mid[dao.TaskRunning])
				}
				for i, tm := range appTimers(t, s, app) {
					if before[i].Status != dao.StatusEnabled {
						continue
					}
					if tm.Status != dao.StatusDisabled || tm.Version != before[i].Version+1 {
						t.Fatalf("timer %d: %s version %d: written %d times", tm.ID, tm.Status, tm.Version, tm.Version-before[i].Version)
					}
					// The engine hears of it at least once; a task finished by the restart
					// tells it again (idempotent), in case the kill came before the telling.
					if told := len(hook.of(tm.ID)) + len(hook2.of(tm.ID)); told < 1 || inFlight[tm.ID] && len(hook2.of(tm.ID)) != 1 {
						t.Fatalf("timer %d: engine told %d times (restart: %d)", tm.ID, told, len(hook2.of(tm.ID)))
					}
				}
			})
		})
	}
}

// dyingHook lets `after` changes through, then hangs every caller (a worker that wrote its
// timer and has not recorded the outcome yet) until killed is closed.
type dyingHook struct {
	*countingHook
	mu      sync.Mutex
	after   int
	seen    int
	killed  chan struct{}
	blocked chan int64
}

func (h *dyingHook) TimerChanged(ctx context.Context, before *dao.Timer, after dao.Timer) error {
	h.mu.Lock()
	h.seen++
	hang := h.seen > h.after
	h.mu.Unlock()
	if err := h.countingHook.TimerChanged(ctx, before, after); err != nil {
		return err
	}
	if hang {
		select {
		case h.blocked <- after.ID:
		default:
		}
		<-h.killed
	}
	return nil
}
