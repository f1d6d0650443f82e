package migrator_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
	"github.com/tockd/tock/migrator"
	"github.com/tockd/tock/schedule"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

type testBundle struct {
	clk   *clockwork.FakeClock
	redis *indextest.Redis
	store *dao.Store
	idx   *index.Index
	mig   *migrator.Migrator
	seq   int
}

// setup runs the migrator with hour steps, which the tests below were written for; the
// default minute steps have tests of their own (minutes_test.go).
func setup(t *testing.T, start time.Time, pageSize int) *testBundle {
	t.Helper()
	return setupCfg(t, start, migrator.Config{Step: time.Hour, PageSize: pageSize})
}

// setupCfg is setup with cfg (its Clock and Logger are set here).
func setupCfg(t *testing.T, start time.Time, cfg migrator.Config) *testBundle {
	t.Helper()
	clk := clockwork.NewFakeClockAt(start)
	r := indextest.Miniredis(t, clk)
	b := &testBundle{clk: clk, redis: r, store: daotest.SQLite(t), idx: index.New(r.Client, index.NewKeys(r.Prefix, 4))}
	cfg.Clock, cfg.Logger = clk, slog.New(slog.DiscardHandler)
	var err error
	b.mig, err = migrator.New(cfg, b.store, b.idx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.mig.Stop)
	return b
}

func (b *testBundle) create(t *testing.T, spec schedule.Spec, anchor time.Time) dao.Timer {
	t.Helper()
	b.seq++
	tm, _, err := b.store.CreateTimer(context.Background(), dao.Timer{
		App: "test", Name: fmt.Sprint("t", b.seq), Status: dao.StatusEnabled, Schedule: dao.JSONSpec(spec),
		AnchorMS: anchor.UnixMilli(), Callback: dao.Callback{URL: "http://127.0.0.1:1/", Method: "POST"},
	}, b.clk.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// stamped lists every occurrence of timer id in the index, as "slice minute|RFC3339 time".
func (b *testBundle) stamped(t *testing.T, id int64) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := b.redis.Client.Keys(ctx, b.redis.Prefix+"{2*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		ms, err := b.redis.Client.ZRange(ctx, k, 0, -1).Result()
		if err != nil {
			continue // a lock key
		}
		for _, m := range ms {
			tid, at, err := dao.ParseKey(m)
			if err != nil || tid != id {
				continue
			}
			minute := k[len(b.redis.Prefix)+1 : len(b.redis.Prefix)+17]
			out = append(out, minute+"|"+time.UnixMilli(at).UTC().Format("15:04:05.000"))
		}
	}
	sort.Strings(out)
	return out
}

func (b *testBundle) markerTTL(t *testing.T, step time.Time) time.Duration {
	return b.redis.Client.PTTL(context.Background(), b.idx.Keys().MigrateMarker(step)).Val()
}

var day = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)

func at(h, m, s int) time.Time {
	return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
}

func slot(h, m, s int) string {
	t := at(h, m, s)
	return t.Format("2006-01-02 15:04") + "|" + t.Format("15:04:05.000")
}

func TestRunOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("StampsFromCurrentMinuteToNextStepPlusWindow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, at(9, 10, 30), 0)
		tm := b.create(t, schedule.Spec{Every: "20m"}, at(9, 0, 0))
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		// [09:10, 12:00): 09:20 .. 11:40 (09:00 is before the current minute).
		var want []string
		for m := 9*60 + 20; m < 12*60; m += 20 {
			want = append(want, slot(m/60, m%60, 0))
		}
		if got := b.stamped(t, tm.ID); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("stamped\n%v\nwant\n%v", got, want)
		}
		if ttl := b.markerTTL(t, at(9, 0, 0)); ttl != at(12, 0, 0).Sub(at(9, 10, 30)) {
			t.Fatalf("marker PTTL %s, want until the horizon 12:00", ttl)
		}
	})

	t.Run("MarkerMakesItANoOp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, at(9, 10, 30), 0)
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		tm := b.create(t, schedule.Spec{Every: "20m"}, at(9, 0, 0))
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		if got := b.stamped(t, tm.ID); len(got) != 0 {
			t.Fatalf("stamped %v although the window's marker is set", got)
		}
	})

	t.Run("StepBoundaryStampsOnlyTheNewHour", func(t *testing.T) {
		t.Parallel()
		b := setup(t, at(9, 10, 30), 0)
		tm := b.create(t, schedule.Spec{Every: "20m"}, at(9, 0, 0))
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		// Drop a slice inside the already-covered part: a step pass must not re-stamp it.
		b.redis.Client.Del(ctx, b.idx.Keys().Slice(index.SliceAt(at(11, 20, 0), b.idx.Keys().Bucket(tm.ID))))
		b.redis.SetTime(at(10, 0, 0))
		b.clk.Advance(at(10, 0, 0).Sub(b.clk.Now()))
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		got := b.stamped(t, tm.ID)
		if got[0] != slot(9, 20, 0) || got[len(got)-1] != slot(12, 40, 0) || len(got) != 10 || slices.Contains(got, slot(11, 20, 0)) {
			t.Fatalf("stamped %v: want 09:20..12:40 without 11:20 (only 12:00-13:00 is new)", got)
		}
	})

	t.Run("RebuildsAfterRedisEmptied", func(t *testing.T) {
		t.Parallel()
		b := setup(t, at(9, 10, 30), 0)
		tm := b.create(t, schedule.Spec{Cron: "*/15 * * * *"}, at(9, 0, 0))
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		before := b.stamped(t, tm.ID)
		b.redis.Mini.FlushAll()
		b.redis.SetTime(at(9, 14, 10))
		b.clk.Advance(at(9, 14, 10).Sub(b.clk.Now()))
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		if got := b.stamped(t, tm.ID); fmt.Sprint(got) != fmt.Sprint(before) || len(got) != 11 {
			t.Fatalf("after flush stamped %v, want as before %v", got, before)
		}
	})

	t.Run("AnotherInstanceHoldsTheStep", func(t *testing.T) {
		t.Parallel()
		b := setup(t, at(9, 10, 30), 0)
		tm := b.create(t, schedule.Spec{Every: "20m"}, at(9, 0, 0))
		if _, ok, err := index.TryLock(ctx, b.redis.Client, b.idx.Keys().MigrateLock(at(9, 0, 0)), time.Minute, b.clk.Now()); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		if got := b.stamped(t, tm.ID); len(got) != 0 || b.markerTTL(t, at(9, 0, 0)) != -2 {
			t.Fatalf("stamped %v while another instance holds the step's lock", got)
		}
	})

	t.Run("PagesThroughAllTimers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, at(9, 10, 30), 2)
		var ids []int64
		for range 7 {
			ids = append(ids, b.create(t, schedule.Spec{Every: "1h"}, at(9, 30, 0)).ID)
		}
		disabled := b.create(t, schedule.Spec{Every: "1h"}, at(9, 30, 0))
		disabled.Status = dao.StatusDisabled
		if _, err := b.store.UpdateTimer(ctx, disabled, disabled.Version, b.clk.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if got := b.stamped(t, id); len(got) != 2 {
				t.Errorf("timer %d stamped %v, want 10:30 and 11:30", id, got)
			}
		}
		if got := b.stamped(t, disabled.ID); len(got) != 0 {
			t.Errorf("disabled timer stamped %v", got)
		}
	})

	t.Run("NothingBeforeTheTimersLastChange", func(t *testing.T) {
		t.Parallel()
		b := setup(t, at(9, 10, 30), 0)
		tm := b.create(t, schedule.Spec{Cron: "*/10 * * * * *"}, at(9, 0, 0)) // created 09:10:30
		if err := b.mig.TimerChanged(ctx, nil, tm); err != nil {
			t.Fatal(err)
		}
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		got := b.stamped(t, tm.ID)
		if got[0] != slot(9, 10, 30) || got[len(got)-1] != slot(11, 59, 50) {
			t.Fatalf("stamped %s .. %s, want 09:10:30 (creation, not the minute's start) .. 11:59:50", got[0], got[len(got)-1])
		}
	})

	t.Run("OneShots", func(t *testing.T) {
		t.Parallel()
		b := setup(t, at(9, 10, 30), 0)
		past := b.create(t, schedule.Spec{At: schedule.FormatTime(at(8, 0, 0))}, at(9, 0, 0))
		inMinute := b.create(t, schedule.Spec{At: schedule.FormatTime(at(9, 10, 5))}, at(9, 0, 0))
		soon := b.create(t, schedule.Spec{At: schedule.FormatTime(at(11, 59, 59))}, at(9, 0, 0))
		later := b.create(t, schedule.Spec{At: schedule.FormatTime(at(12, 0, 0))}, at(9, 0, 0))
		if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
			t.Fatal(err)
		}
		for tm, want := range map[int64]string{
			past.ID:     at(9, 10, 0).Format("2006-01-02 15:04") + "|08:00:00.000", // current slice, own time
			inMinute.ID: slot(9, 10, 5),
			soon.ID:     slot(11, 59, 59),
		} {
			if got := b.stamped(t, tm); len(got) != 1 || got[0] != want {
				t.Errorf("timer %d stamped %v, want [%s]", tm, got, want)
			}
		}
		if got := b.stamped(t, later.ID); len(got) != 0 {
			t.Errorf("one-shot beyond the horizon stamped %v", got)
		}
	})
}

func TestTimerChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, at(9, 10, 30), 0)

	tm := b.create(t, schedule.Spec{Every: "30m"}, at(9, 0, 0))
	if err := b.mig.TimerChanged(ctx, nil, tm); err != nil {
		t.Fatal(err)
	}
	want := []string{slot(9, 30, 0), slot(10, 0, 0), slot(10, 30, 0), slot(11, 0, 0), slot(11, 30, 0)}
	if got := b.stamped(t, tm.ID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after create: %v, want %v", got, want)
	}

	t.Run("CallbackChangeKeepsOccurrences", func(t *testing.T) {
		after := tm
		after.Callback.URL = "http://127.0.0.1:2/"
		after.Version++
		if err := b.mig.TimerChanged(ctx, &tm, after); err != nil {
			t.Fatal(err)
		}
		if got := b.stamped(t, tm.ID); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("ScheduleChangeReplacesOccurrences", func(t *testing.T) {
		after := tm
		after.Schedule = dao.JSONSpec(schedule.Spec{Every: "1h"})
		if err := b.mig.TimerChanged(ctx, &tm, after); err != nil {
			t.Fatal(err)
		}
		// 10:00 and 11:00 are in both definitions and stay.
		want := []string{slot(10, 0, 0), slot(11, 0, 0)}
		if got := b.stamped(t, tm.ID); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		tm = after
	})
	t.Run("DisableRemoves", func(t *testing.T) {
		after := tm
		after.Status = dao.StatusDisabled
		if err := b.mig.TimerChanged(ctx, &tm, after); err != nil {
			t.Fatal(err)
		}
		if got := b.stamped(t, tm.ID); len(got) != 0 {
			t.Fatalf("disabled timer still stamped: %v", got)
		}
		// Enable again: stamped again.
		if err := b.mig.TimerChanged(ctx, &after, tm); err != nil {
			t.Fatal(err)
		}
		if got := b.stamped(t, tm.ID); len(got) != 2 {
			t.Fatalf("re-enabled timer stamped %v", got)
		}
	})
	t.Run("DeleteRemoves", func(t *testing.T) {
		after := tm
		after.Status = dao.StatusDeleted
		if err := b.mig.TimerChanged(ctx, &tm, after); err != nil {
			t.Fatal(err)
		}
		if got := b.stamped(t, tm.ID); len(got) != 0 {
			t.Fatalf("deleted timer still stamped: %v", got)
		}
	})
}

func TestLoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, at(9, 59, 55), 0)
	tm := b.create(t, schedule.Spec{Every: "1h"}, at(9, 30, 0))
	if err := b.mig.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// step runs the clock to target in whole seconds, letting the loop settle each time.
	step := func(target time.Time) {
		for b.clk.Now().Before(target) {
			bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := b.clk.BlockUntilContext(bctx, 1); err != nil {
				t.Fatal("migrator loop does not wait on the clock")
			}
			cancel()
			next := b.clk.Now().Truncate(time.Second).Add(time.Second)
			b.redis.SetTime(next)
			b.clk.Advance(next.Sub(b.clk.Now()))
		}
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := b.clk.BlockUntilContext(bctx, 1); err != nil {
			t.Fatal("migrator loop does not wait on the clock")
		}
	}
	step(at(9, 59, 56))
	if got := b.stamped(t, tm.ID); len(got) != 2 {
		t.Fatalf("at start stamped %v, want 10:30 and 11:30 (horizon 12:00)", got)
	}
	step(at(10, 0, 0))
	if ttl := b.markerTTL(t, at(10, 0, 0)); ttl <= 0 {
		t.Fatalf("no marker for the 10:00 step at 10:00:00 (PTTL %s): the step boundary did not run", ttl)
	}
	if got := b.stamped(t, tm.ID); len(got) != 3 || got[2] != slot(12, 30, 0) {
		t.Fatalf("after the 10:00 step stamped %v, want up to 12:30 (horizon 13:00)", got)
	}
	b.redis.Mini.FlushAll()
	step(at(10, 0, 10))
	if got := b.stamped(t, tm.ID); len(got) != 3 {
		t.Fatalf("10s after Redis was emptied stamped %v, want rebuilt", got)
	}
	b.mig.Stop()
	b.mig.Stop()
}

func TestFailedTimerChangedForcesFullPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, at(9, 10, 30), 0)
	if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
		t.Fatal(err)
	}
	tm := b.create(t, schedule.Spec{Every: "30m"}, at(9, 0, 0))
	b.redis.Mini.SetError("LOADING Redis is loading the dataset in memory")
	if err := b.mig.TimerChanged(ctx, nil, tm); err == nil {
		t.Fatal("TimerChanged succeeded with Redis failing")
	}
	b.redis.Mini.SetError("")
	if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if got := b.stamped(t, tm.ID); len(got) != 5 {
		t.Fatalf("after the failed TimerChanged, the next pass stamped %v; want the timer's window", got)
	}
	// Repaired: the next pass is a no-op again.
	other := b.create(t, schedule.Spec{Every: "30m"}, at(9, 0, 0))
	if err := b.mig.RunOnce(ctx, b.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if got := b.stamped(t, other.ID); len(got) != 0 {
		t.Fatalf("pass after the repair stamped %v; want a no-op (marker set)", got)
	}
}
