package migrator_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tockd/tock/index"
	"github.com/tockd/tock/migrator"
	"github.com/tockd/tock/schedule"
)

// Tests of the default configuration: the window moves by one minute at a time.

// minuteBundle runs the migrator with the default step and window.
func minuteBundle(t *testing.T, start time.Time) *testBundle {
	t.Helper()
	return setupCfg(t, start, migrator.Config{})
}

// moveTo sets the clock (and the fake Redis's time) to target, with nothing running.
func (b *testBundle) moveTo(target time.Time) {
	b.redis.SetTime(target)
	b.clk.Advance(target.Sub(b.clk.Now()))
}

// runAt moves to target and runs one pass there.
func (b *testBundle) runAt(t *testing.T, target time.Time) {
	t.Helper()
	b.moveTo(target)
	if err := b.mig.RunOnce(context.Background(), target); err != nil {
		t.Fatal(err)
	}
}

// sliceOf is the slice of timer id's bucket at t.
func (b *testBundle) sliceOf(id int64, t time.Time) index.Slice {
	return index.SliceAt(t, b.idx.Keys().Bucket(id))
}

// dropSlice deletes a slice's ZSET, so the tests can tell whether a pass stamped it again.
func (b *testBundle) dropSlice(t *testing.T, s index.Slice) {
	t.Helper()
	if err := b.redis.Client.Del(context.Background(), b.idx.Keys().Slice(s)).Err(); err != nil {
		t.Fatal(err)
	}
}

// count is how many occurrences of timer id are stamped in the slice of its bucket at t.
func (b *testBundle) count(t *testing.T, id int64, at time.Time) int {
	t.Helper()
	occ, _, err := b.idx.Read(context.Background(), b.sliceOf(id, at))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range occ {
		if o.TimerID == id {
			n++
		}
	}
	return n
}

// markerValue is the horizon (unix ms) held by the step's marker; 0 when missing.
func (b *testBundle) markerValue(t *testing.T, step time.Time) int64 {
	t.Helper()
	v, err := b.redis.Client.Get(context.Background(), b.idx.Keys().MigrateMarker(step)).Result()
	if err != nil {
		return 0
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("marker of %s holds %q, not unix ms", step, v)
	}
	return ms
}

func TestMinuteSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DefaultsAreAMinuteStepAndATwoHourWindow", func(t *testing.T) {
		t.Parallel()
		if migrator.DefaultStep != time.Minute || migrator.DefaultWindow != 2*time.Hour {
			t.Fatalf("defaults: step %s, window %s", migrator.DefaultStep, migrator.DefaultWindow)
		}
		b := minuteBundle(t, at(9, 10, 30))
		if h := b.mig.Horizon(at(9, 10, 30)); !h.Equal(at(11, 11, 0)) {
			t.Fatalf("Horizon(09:10:30) = %s, want 11:11 (next minute + 2h)", h)
		}
	})

	t.Run("FirstPassStampsTheWholeWindow", func(t *testing.T) {
		t.Parallel()
		b := minuteBundle(t, at(9, 10, 30))
		tm := b.create(t, schedule.Spec{Every: "20m"}, at(9, 0, 0))
		b.runAt(t, at(9, 10, 30))
		want := []string{slot(9, 20, 0), slot(9, 40, 0), slot(10, 0, 0), slot(10, 20, 0), slot(10, 40, 0), slot(11, 0, 0)}
		if got := b.stamped(t, tm.ID); len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
			t.Fatalf("stamped %v, want %v", got, want)
		}
		if v := b.markerValue(t, at(9, 10, 0)); v != at(11, 11, 0).UnixMilli() {
			t.Fatalf("marker holds %d, want the horizon 11:11", v)
		}
		if ttl := b.markerTTL(t, at(9, 10, 0)); ttl != at(11, 11, 0).Sub(at(9, 10, 30)) {
			t.Fatalf("marker PTTL %s, want until the horizon", ttl)
		}
	})

	t.Run("EachMinuteStampsOnlyTheMinuteEnteringTheWindow", func(t *testing.T) {
		t.Parallel()
		b := minuteBundle(t, at(9, 10, 30))
		tm := b.create(t, schedule.Spec{Every: "10s"}, at(9, 0, 0))
		b.runAt(t, at(9, 10, 30))
		if n := b.count(t, tm.ID, at(11, 10, 0)); n != 6 {
			t.Fatalf("first pass: last minute 11:10 holds %d occurrences, want 6", n)
		}
		if n := b.count(t, tm.ID, at(11, 11, 0)); n != 0 {
			t.Fatalf("first pass stamped %d occurrences at the horizon 11:11", n)
		}
		// A slice inside the stamped part, dropped: a routine step must not stamp it again.
		b.dropSlice(t, b.sliceOf(tm.ID, at(10, 0, 0)))
		for k := 1; k <= 3; k++ {
			b.runAt(t, at(9, 10+k, 0))
			entering := at(11, 10+k, 0)
			if n := b.count(t, tm.ID, entering); n != 6 {
				t.Fatalf("step %d: the minute entering the window (%s) holds %d, want 6", k, entering.Format("15:04"), n)
			}
			if n := b.count(t, tm.ID, entering.Add(time.Minute)); n != 0 {
				t.Fatalf("step %d stamped past its horizon", k)
			}
			if n := b.count(t, tm.ID, at(10, 0, 0)); n != 0 {
				t.Fatalf("step %d stamped the whole window again (10:00 refilled)", k)
			}
		}
	})

	t.Run("SkippedStepsStampOnlyTheGap", func(t *testing.T) {
		t.Parallel()
		b := minuteBundle(t, at(9, 10, 30))
		tm := b.create(t, schedule.Spec{Every: "30s"}, at(9, 0, 0))
		b.runAt(t, at(9, 10, 30))
		b.dropSlice(t, b.sliceOf(tm.ID, at(10, 0, 0)))
		// No pass from 09:11 to 09:14 (every instance busy or down): at 09:15:20 the 09:10
		// marker still vouches for everything up to 11:11.
		b.runAt(t, at(9, 15, 20))
		for m := 11; m <= 15; m++ {
			if n := b.count(t, tm.ID, at(11, m, 0)); n != 2 {
				t.Fatalf("gap minute 11:%d holds %d, want 2", m, n)
			}
		}
		if n := b.count(t, tm.ID, at(10, 0, 0)); n != 0 {
			t.Fatal("skipped steps made a full rebuild (10:00 refilled)")
		}
		if v := b.markerValue(t, at(9, 15, 0)); v != at(11, 16, 0).UnixMilli() {
			t.Fatalf("marker holds %d, want the horizon 11:16", v)
		}
	})

	t.Run("PassLongerThanAStepDoesNotStartARebuild", func(t *testing.T) {
		t.Parallel()
		b := minuteBundle(t, at(9, 9, 10))
		tm := b.create(t, schedule.Spec{Every: "30s"}, at(9, 0, 0))
		b.runAt(t, at(9, 9, 10))
		b.dropSlice(t, b.sliceOf(tm.ID, at(10, 0, 0)))
		// Another instance is still stamping the 09:10 step (its marker not set yet).
		if _, ok, err := index.TryLock(ctx, b.redis.Client, b.idx.Keys().MigrateLock(at(9, 10, 0)), 2*time.Minute, at(9, 10, 0)); !ok || err != nil {
			t.Fatal(ok, err)
		}
		b.runAt(t, at(9, 10, 5))
		if n := b.count(t, tm.ID, at(11, 10, 0)); n != 0 {
			t.Fatal("stamped the 09:10 step while another instance holds its lock")
		}
		// At 09:11 the previous step's marker is missing but the one before covers 11:10.
		b.runAt(t, at(9, 11, 0))
		if n := b.count(t, tm.ID, at(10, 0, 0)); n != 0 {
			t.Fatal("a missing previous marker made a full rebuild (10:00 refilled)")
		}
		for _, m := range []int{10, 11} {
			if n := b.count(t, tm.ID, at(11, m, 0)); n != 2 {
				t.Fatalf("11:%d holds %d, want 2", m, n)
			}
		}
	})

	t.Run("EmptiedRedisIsRebuilt", func(t *testing.T) {
		t.Parallel()
		b := minuteBundle(t, at(9, 10, 30))
		tm := b.create(t, schedule.Spec{Every: "20m"}, at(9, 0, 0))
		b.runAt(t, at(9, 10, 30))
		b.redis.Mini.FlushAll()
		b.runAt(t, at(9, 10, 40))
		got := b.stamped(t, tm.ID)
		if len(got) != 6 || got[0] != slot(9, 20, 0) || got[5] != slot(11, 0, 0) {
			t.Fatalf("after the flush stamped %v, want 09:20 .. 11:00 again", got)
		}
	})

	t.Run("MarkerOfAnOlderVersionMeansMoreWorkNotLess", func(t *testing.T) {
		t.Parallel()
		b := minuteBundle(t, at(9, 10, 30))
		tm := b.create(t, schedule.Spec{Every: "30s"}, at(9, 0, 0))
		b.runAt(t, at(9, 10, 30))
		b.dropSlice(t, b.sliceOf(tm.ID, at(10, 0, 0)))
		// Before markers held their horizon, they held the time they were set.
		if err := b.redis.Client.Set(ctx, b.idx.Keys().MigrateMarker(at(9, 10, 0)), at(9, 10, 30).UnixMilli(), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		b.runAt(t, at(9, 11, 0))
		if n := b.count(t, tm.ID, at(10, 0, 0)); n != 2 {
			t.Fatalf("10:00 holds %d after a pass under an old-format marker, want 2 (stamped from the current minute)", n)
		}
	})

	t.Run("TimerChangedStampsTheWholeWindowAtOnce", func(t *testing.T) {
		t.Parallel()
		b := minuteBundle(t, at(9, 10, 30))
		b.runAt(t, at(9, 10, 30))
		tm := b.create(t, schedule.Spec{Every: "30m"}, at(9, 0, 0))
		if err := b.mig.TimerChanged(ctx, nil, tm); err != nil {
			t.Fatal(err)
		}
		want := []string{slot(9, 30, 0), slot(10, 0, 0), slot(10, 30, 0), slot(11, 0, 0)}
		if got := b.stamped(t, tm.ID); len(got) != len(want) || got[0] != want[0] || got[3] != want[3] {
			t.Fatalf("stamped %v, want %v", got, want)
		}
	})
}

func TestLoopMinuteSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := minuteBundle(t, at(9, 59, 55))
	tm := b.create(t, schedule.Spec{Every: "1m"}, at(9, 0, 0))
	if err := b.mig.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// runTo runs the clock to target in whole seconds, letting the loop settle each time.
	runTo := func(target time.Time) {
		t.Helper()
		settle := func() {
			bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := b.clk.BlockUntilContext(bctx, 1); err != nil {
				t.Fatal("migrator loop does not wait on the clock")
			}
		}
		for b.clk.Now().Before(target) {
			settle()
			b.moveTo(b.clk.Now().Truncate(time.Second).Add(time.Second))
		}
		settle()
	}
	runTo(at(9, 59, 56))
	if got := b.stamped(t, tm.ID); len(got) != 120 || got[0] != slot(10, 0, 0) || got[119] != slot(11, 59, 0) {
		t.Fatalf("at start stamped %d occurrences, want 120: 10:00 .. 11:59 (horizon 12:00)", len(got))
	}
	runTo(at(10, 0, 0))
	if got := b.stamped(t, tm.ID); len(got) != 121 || got[120] != slot(12, 0, 0) {
		t.Fatalf("after the 10:00 step stamped %d, want 121 up to 12:00", len(got))
	}
	runTo(at(10, 1, 0))
	if got := b.stamped(t, tm.ID); len(got) != 122 || got[121] != slot(12, 1, 0) {
		t.Fatalf("after the 10:01 step stamped %d, want 122 up to 12:01", len(got))
	}
	b.redis.Mini.FlushAll()
	runTo(at(10, 1, 10))
	if got := b.stamped(t, tm.ID); len(got) != 121 || got[0] != slot(10, 1, 0) || got[120] != slot(12, 1, 0) {
		t.Fatalf("10s after Redis was emptied stamped %d, want 121: 10:01 .. 12:01", len(got))
	}
	b.mig.Stop()
}
