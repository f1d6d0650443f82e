package executor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/schedule"
)

// countingStore counts timer reads.
type countingStore struct {
	*dao.Store
	reads atomic.Int64
}

func (c *countingStore) GetTimer(ctx context.Context, id int64) (dao.Timer, error) {
	c.reads.Add(1)
	return c.Store.GetTimer(ctx, id)
}

// Hide the group methods so every read goes through GetTimer.
type ungroupedCounting struct{ executor.Store }

// The cached definition saves a read per occurrence, and is never trusted to be current:
// a timer changed (new version, same schedule), disabled and re-enabled, or rescheduled
// within the cache's lifetime still fires exactly as its stored definition says.
func TestTimerCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ds := daotest.SQLite(t)
	cs := &countingStore{Store: ds}
	b := setup(t, ungroupedCounting{cs}, executor.Config{TimerCacheTTL: time.Hour})
	b.store = ds
	rcv := newReceiver(t, nil)
	tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
	at := func(sec int) executor.Occurrence {
		return executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Duration(sec) * time.Second).UnixMilli()}
	}
	for sec := 1; sec <= 3; sec++ {
		if res := b.exec.Execute(ctx, at(sec)); res.Outcome != executor.Succeeded {
			t.Fatalf("occurrence %d: %+v", sec, res)
		}
	}
	if n := cs.reads.Load(); n != 1 {
		t.Fatalf("%d timer reads for 3 occurrences, want 1 (cached)", n)
	}

	update := func(change func(*dao.Timer)) {
		t.Helper()
		cur, err := ds.GetTimer(ctx, tm.ID)
		if err != nil {
			t.Fatal(err)
		}
		change(&cur)
		if _, err := ds.UpdateTimer(ctx, cur, cur.Version, t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	// A new version with the same schedule: the claim at the cached version fails, the
	// stored definition is read, and the occurrence fires.
	update(func(x *dao.Timer) { x.Callback.Body = "v2" })
	if res := b.exec.Execute(ctx, at(4)); res.Outcome != executor.Succeeded {
		t.Fatalf("after an update: %+v, want succeeded", res)
	}
	// Disabled: the cached "enabled" is not trusted past the failed claim.
	update(func(x *dao.Timer) { x.Status = dao.StatusDisabled })
	if res := b.exec.Execute(ctx, at(5)); res.Outcome != executor.Skipped {
		t.Fatalf("disabled: %+v, want skipped", res)
	}
	// Re-enabled with another schedule: the cached definition of the disabled timer is gone,
	// an occurrence of the old schedule is skipped and one of the new fires.
	update(func(x *dao.Timer) {
		x.Status = dao.StatusEnabled
		x.Schedule = dao.JSONSpec(schedule.Spec{Every: "2s"})
	})
	if res := b.exec.Execute(ctx, at(7)); res.Outcome != executor.Skipped {
		t.Fatalf("old schedule's occurrence: %+v, want skipped", res)
	}
	if res := b.exec.Execute(ctx, at(8)); res.Outcome != executor.Succeeded {
		t.Fatalf("new schedule's occurrence: %+v, want succeeded", res)
	}
	if got := rcv.calls.Load(); got != 5 {
		t.Fatalf("%d calls, want 5", got)
	}
}

// An occurrence handed over ahead of its time is claimed at once and called at its
// millisecond, not before.
func TestClaimAheadCallsAtTheScheduledTime(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, executor.Config{ClaimAhead: 100 * time.Millisecond})
	rcv := newReceiver(t, nil)
	tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
	due := t0.Add(time.Second)
	b.clk.Advance(920 * time.Millisecond) // 80 ms before due
	done := make(chan executor.Result, 1)
	go func() {
		done <- b.exec.Execute(context.Background(), executor.Occurrence{TimerID: tm.ID, ScheduledMS: due.UnixMilli()})
	}()
	// The claim is made before the due time, then the executor waits on the clock.
	if err := b.clk.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if es := b.executions(t, tm.ID); len(es) != 1 || es[0].Status != dao.ExecRunning {
		t.Fatalf("executions before the due time: %+v, want one claimed", es)
	}
	b.clk.Advance(79 * time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if n := rcv.calls.Load(); n != 0 {
		t.Fatalf("called %d times 1 ms before its time", n)
	}
	b.clk.Advance(time.Millisecond)
	if res := <-done; res.Outcome != executor.Succeeded || rcv.calls.Load() != 1 {
		t.Fatalf("at its time: %+v, %d calls", res, rcv.calls.Load())
	}
}

// A claim whose answer was lost leaves this instance's running row; if the timer is disabled
// meanwhile, the next try must not adopt that row on the strength of the cached definition.
func TestTimerCacheNeverAdoptsForADisabledTimer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ds := daotest.SQLite(t)
	fs := &failingStore{Store: ds}
	b := setup(t, fs, executor.Config{TimerCacheTTL: time.Hour})
	b.store = ds
	rcv := newReceiver(t, nil)
	tm := b.createTimer(t, everySecond, dao.Callback{URL: rcv.URL})
	first := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(time.Second).UnixMilli()}
	second := executor.Occurrence{TimerID: tm.ID, ScheduledMS: t0.Add(2 * time.Second).UnixMilli()}
	if res := b.exec.Execute(ctx, first); res.Outcome != executor.Succeeded {
		t.Fatalf("first: %+v", res) // the definition is cached now
	}
	fs.loseClaimAnswer.Store(true)
	if res := b.exec.Execute(ctx, second); res.Outcome != executor.Unrecorded {
		t.Fatalf("claim answer lost: %+v, want unrecorded", res)
	}
	fs.loseClaimAnswer.Store(false)
	cur, err := ds.GetTimer(ctx, tm.ID)
	if err != nil {
		t.Fatal(err)
	}
	cur.Status = dao.StatusDisabled
	if _, err := ds.UpdateTimer(ctx, cur, cur.Version, t0.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if res := b.exec.Execute(ctx, second); res.Outcome != executor.Skipped {
		t.Fatalf("after disabling: %+v, want skipped", res)
	}
	if n := rcv.calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1: the disabled timer's occurrence was called", n)
	}
}
