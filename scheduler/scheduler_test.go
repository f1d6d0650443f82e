package scheduler_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
	"github.com/tockd/tock/scheduler"
)

// IgnoreCurrent: ants (imported via executor) starts its default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// minute is the start of the slice minute M the tests revolve around.
var minute = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

type submission struct {
	occ      executor.Occurrence
	at       time.Time
	instance int
}

// fakeExec answers at once with outcome(occ, now) (default succeeded) and records every
// submission with the clock's time.
type fakeExec struct {
	instance int
	clk      clockwork.Clock
	mu       *sync.Mutex
	subs     *[]submission
	outcome  func(executor.Occurrence, time.Time) executor.Outcome
}

func (f *fakeExec) Submit(_ context.Context, occ executor.Occurrence, done func(executor.Result)) error {
	now := f.clk.Now()
	f.mu.Lock()
	*f.subs = append(*f.subs, submission{occ: occ, at: now, instance: f.instance})
	f.mu.Unlock()
	out := executor.Succeeded
	if f.outcome != nil {
		out = f.outcome(occ, now)
	}
	done(executor.Result{Occurrence: occ, Outcome: out})
	return nil
}

type testBundle struct {
	clk    *clockwork.FakeClock
	redis  *indextest.Redis
	idx    *index.Index
	scheds []*scheduler.Scheduler
	mu     sync.Mutex
	subs   []submission
}

// setup starts n schedulers over one miniredis, with 2 buckets, at start.
func setup(t *testing.T, start time.Time, n int, outcome func(executor.Occurrence, time.Time) executor.Outcome) *testBundle {
	t.Helper()
	clk := clockwork.NewFakeClockAt(start)
	r := indextest.Miniredis(t, clk)
	b := &testBundle{clk: clk, redis: r, idx: index.New(r.Client, index.NewKeys(r.Prefix, 2))}
	for i := range n {
		s, err := scheduler.New(scheduler.Config{Buckets: 2, Clock: clk, Logger: slog.New(slog.DiscardHandler)},
			b.idx, &fakeExec{instance: i, clk: clk, mu: &b.mu, subs: &b.subs, outcome: outcome})
		if err != nil {
			t.Fatal(err)
		}
		b.scheds = append(b.scheds, s)
	}
	return b
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	for _, s := range b.scheds {
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
	}
}

// stamp puts occurrences of timer id at the given offsets from minute into the index.
func (b *testBundle) stamp(t *testing.T, id int64, offsets ...time.Duration) {
	t.Helper()
	var es []index.Entry
	for _, d := range offsets {
		at := minute.Add(d)
		es = append(es, index.Entry{Slice: index.SliceAt(at, b.idx.Keys().Bucket(id)), TimerID: id, ScheduledMS: at.UnixMilli()})
	}
	if err := b.idx.Add(context.Background(), es, b.clk.Now()); err != nil {
		t.Fatal(err)
	}
}

// settle waits until every scheduler loop and trigger sleeps on the clock.
func (b *testBundle) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		want := 0
		for _, s := range b.scheds {
			want += 1 + s.Running()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := b.clk.BlockUntilContext(ctx, want)
		cancel()
		again := 0
		for _, s := range b.scheds {
			again += 1 + s.Running()
		}
		if err == nil && again == want {
			return
		}
	}
	t.Fatal("engine did not settle on the clock within 10s")
}

// runTo advances the clock to target, stopping at every whole second and at each of stops,
// and letting everything settle at each step.
func (b *testBundle) runTo(t *testing.T, target time.Time, stops ...time.Time) {
	t.Helper()
	for {
		b.settle(t)
		now := b.clk.Now()
		if !now.Before(target) {
			return
		}
		next := now.Truncate(time.Second).Add(time.Second)
		if target.Before(next) {
			next = target
		}
		for _, s := range stops {
			if s.After(now) && s.Before(next) {
				next = s
			}
		}
		b.redis.SetTime(next)
		b.clk.Advance(next.Sub(now))
	}
}

func (b *testBundle) submissions() []submission {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.subs)
}

func (b *testBundle) lockTTL(t *testing.T, sl index.Slice) time.Duration {
	t.Helper()
	return b.redis.Client.PTTL(context.Background(), b.idx.Keys().SliceLock(sl)).Val()
}

func TestScheduler(t *testing.T) {
	t.Parallel()

	t.Run("HandsOverAtMinuteBoundary", func(t *testing.T) {
		t.Parallel()
		b := setup(t, minute.Add(50*time.Second), 1, nil)
		offsets := []time.Duration{59500 * time.Millisecond, 59999 * time.Millisecond, 60 * time.Second, 60250 * time.Millisecond, 61 * time.Second}
		b.stamp(t, 1, offsets...)
		b.stamp(t, 2, offsets...)
		b.start(t)
		var stops []time.Time
		for _, d := range offsets {
			stops = append(stops, minute.Add(d))
		}
		b.runTo(t, minute.Add(65*time.Second), stops...)

		got := b.submissions()
		if len(got) != 2*len(offsets) {
			t.Fatalf("%d submissions, want %d: %v", len(got), 2*len(offsets), got)
		}
		for _, s := range got {
			if s.at.UnixMilli() != s.occ.ScheduledMS {
				t.Errorf("%s submitted at %s, not at its millisecond", s.occ.Key(), s.at.Format(time.StampMilli))
			}
		}
		// Slice M completed (extended past 2T), slice M+1 is held with its first TTL.
		for bucket := range 2 {
			if ttl := b.lockTTL(t, index.Slice{Start: minute, Bucket: bucket}); ttl < 2*time.Minute {
				t.Errorf("bucket %d: completed slice M lock PTTL %s, want extended to about 2.5T", bucket, ttl)
			}
			next := index.Slice{Start: minute.Add(time.Minute), Bucket: bucket}
			if ttl := b.lockTTL(t, next); ttl != scheduler.DefaultLeaseTTL {
				t.Errorf("bucket %d: slice M+1 lock PTTL %s at M+65s, want the lease renewed to %s", bucket, ttl, scheduler.DefaultLeaseTTL)
			}
		}
	})

	t.Run("ReRunsPreviousSliceWhenFirstRunIncomplete", func(t *testing.T) {
		t.Parallel()
		// The store "fails" for timer 1's occurrence until M+88s: past the first run's deadline
		// (M+87.5s: the hard expiry M+90s less half the lease), so that run ends incomplete;
		// its lease, renewed up to the hard expiry only, ends at M+90s, when slice M is the
		// previous slice and is re-run.
		storeBack := minute.Add(88 * time.Second)
		b := setup(t, minute, 1, func(o executor.Occurrence, now time.Time) executor.Outcome {
			if o.TimerID == 1 && now.Before(storeBack) {
				return executor.Unrecorded
			}
			return executor.Succeeded
		})
		b.stamp(t, 1, 10*time.Second)
		b.stamp(t, 2, 10*time.Second)
		b.start(t)
		sl := index.SliceAt(minute, b.idx.Keys().Bucket(1))
		b.runTo(t, minute.Add(89*time.Second))
		if ttl := b.lockTTL(t, sl); ttl != time.Second {
			t.Fatalf("incomplete slice lock PTTL %s at M+89s, want 1s (not extended)", ttl)
		}
		before := len(b.submissions())
		b.runTo(t, minute.Add(95*time.Second))

		var last submission
		for _, s := range b.submissions() {
			if s.occ.TimerID == 1 {
				last = s
			}
		}
		if !last.at.Equal(minute.Add(90 * time.Second)) {
			t.Fatalf("last submission of the failed occurrence at %s, want the re-run at M+90s", last.at.Format(time.StampMilli))
		}
		if n := len(b.submissions()) - before; n != 1 {
			t.Fatalf("%d submissions in the re-run, want 1 (only the unrecorded occurrence is not settled; the executor skips the others)", n)
		}
		if ttl := b.lockTTL(t, sl); ttl < 2*time.Minute {
			t.Fatalf("re-run slice lock PTTL %s, want extended after completing", ttl)
		}
	})

	t.Run("CompletedSliceIsNotReRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, minute, 1, nil)
		b.stamp(t, 1, 10*time.Second)
		b.start(t)
		b.runTo(t, minute.Add(2*time.Minute+30*time.Second))
		if got := b.submissions(); len(got) != 1 {
			t.Fatalf("%d submissions, want 1: %v", len(got), got)
		}
	})

	t.Run("LateStartFiresOverdueAtOnce", func(t *testing.T) {
		t.Parallel()
		start := minute.Add(40 * time.Second)
		b := setup(t, start, 1, nil)
		b.stamp(t, 1, 5*time.Second, 20*time.Second, 39999*time.Millisecond, 45*time.Second)
		b.start(t)
		b.runTo(t, minute.Add(50*time.Second))
		got := b.submissions()
		if len(got) != 4 {
			t.Fatalf("%d submissions, want 4", len(got))
		}
		for _, s := range got[:3] {
			if !s.at.Equal(start) {
				t.Errorf("overdue %s submitted at %s, want at once at M+40s", s.occ.Key(), s.at.Format(time.StampMilli))
			}
		}
		if !got[3].at.Equal(minute.Add(45 * time.Second)) {
			t.Errorf("M+45s occurrence submitted at %s", got[3].at.Format(time.StampMilli))
		}
	})

	t.Run("InstancesShareSlicesAndFireEachOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, minute.Add(-2*time.Second), 3, nil)
		for id := int64(1); id <= 40; id++ {
			var offsets []time.Duration
			for s := 0; s < 130; s += 7 {
				offsets = append(offsets, time.Duration(s)*time.Second+time.Duration(id*13)*time.Millisecond)
			}
			b.stamp(t, id, offsets...)
		}
		b.start(t)
		b.runTo(t, minute.Add(135*time.Second))
		seen := map[string]int{}
		instances := map[int]bool{}
		for _, s := range b.submissions() {
			seen[s.occ.Key()]++
			instances[s.instance] = true
		}
		if len(seen) != 40*19 {
			t.Fatalf("%d distinct occurrences submitted, want %d", len(seen), 40*19)
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("%s submitted %d times", k, n)
			}
		}
		t.Logf("slices worked by %d of 3 instances", len(instances))
	})

	t.Run("PrefetchSharesNextMinuteAmongInstances", func(t *testing.T) {
		t.Parallel()
		b := setup(t, minute.Add(-9*time.Second), 2, nil)
		b.start(t)
		b.runTo(t, minute.Add(-9*time.Second))
		before := []int{b.scheds[0].Running(), b.scheds[1].Running()}
		// At M-8s each of the two instances takes one of the two buckets of M (quota 1 per
		// pass), so both are busy at the minute's first millisecond.
		b.runTo(t, minute.Add(-8*time.Second))
		for i, s := range b.scheds {
			if got := s.Running() - before[i]; got != 1 {
				t.Fatalf("instance %d took %d slices of M at M-8s, want 1 each", i, got)
			}
		}
		for bucket := range 2 {
			if ttl := b.lockTTL(t, index.Slice{Start: minute, Bucket: bucket}); ttl != scheduler.DefaultLeaseTTL {
				t.Errorf("bucket %d of M: lock PTTL %s at M-8s, want the lease (%s)", bucket, ttl, scheduler.DefaultLeaseTTL)
			}
		}
		b.stamp(t, 1, 0, 30*time.Second)
		b.stamp(t, 2, 0, 30*time.Second)
		b.runTo(t, minute.Add(31*time.Second), minute)
		got := b.submissions()
		if len(got) != 4 {
			t.Fatalf("submissions %v, want 4", got)
		}
		for _, sub := range got {
			if sub.at.UnixMilli() != sub.occ.ScheduledMS {
				t.Errorf("%s submitted at %s, not at its millisecond", sub.occ.Key(), sub.at.Format(time.StampMilli))
			}
		}
	})

	t.Run("CrashedOwnersSliceIsTakenOverWithinTheLease", func(t *testing.T) {
		t.Parallel()
		// An instance took slice M at M+10s and crashed at once: its lease (5s) is left.
		b := setup(t, minute.Add(10*time.Second), 1, nil)
		b.stamp(t, 1, 12*time.Second, 20*time.Second)
		sl := index.SliceAt(minute, b.idx.Keys().Bucket(1))
		if _, ok, err := index.TryLock(context.Background(), b.redis.Client, b.idx.Keys().SliceLock(sl), scheduler.DefaultLeaseTTL, b.clk.Now()); !ok || err != nil {
			t.Fatalf("crashed owner's lock: %v %v", ok, err)
		}
		b.start(t)
		b.runTo(t, minute.Add(25*time.Second))
		got := b.submissions()
		if len(got) != 2 {
			t.Fatalf("submissions %v, want 2", got)
		}
		// The lease expires at M+15s; the scheduler polling each second takes the slice then
		// and fires the overdue occurrence at once (3s late, not a minute), the next on time.
		if !got[0].at.Equal(minute.Add(15*time.Second)) || !got[1].at.Equal(minute.Add(20*time.Second)) {
			t.Fatalf("submitted at %s and %s, want M+15s and M+20s", got[0].at.Format(time.StampMilli), got[1].at.Format(time.StampMilli))
		}
	})

	t.Run("LiveOwnerKeepsItsLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, minute.Add(10*time.Second), 2, nil)
		b.stamp(t, 1, 40*time.Second)
		b.stamp(t, 2, 40*time.Second)
		b.start(t)
		b.runTo(t, minute.Add(45*time.Second))
		if got := b.submissions(); len(got) != 2 {
			t.Fatalf("submissions %v, want exactly 2: each owner kept its 5s lease for 30s", got)
		}
	})

	t.Run("StopReleasesLocksOfIncompleteSlices", func(t *testing.T) {
		t.Parallel()
		b := setup(t, minute, 1, nil)
		b.start(t)
		b.runTo(t, minute.Add(10*time.Second))
		if b.scheds[0].Running() != 2 {
			t.Fatalf("running %d slices, want the 2 current ones", b.scheds[0].Running())
		}
		b.scheds[0].Stop()
		b.scheds[0].Stop()
		for bucket := range 2 {
			if ttl := b.lockTTL(t, index.Slice{Start: minute, Bucket: bucket}); ttl != -2*time.Nanosecond {
				t.Errorf("bucket %d: lock of the interrupted slice still there (PTTL %s)", bucket, ttl)
			}
			if ttl := b.lockTTL(t, index.Slice{Start: minute.Add(-time.Minute), Bucket: bucket}); ttl < time.Minute {
				t.Errorf("bucket %d: completed previous slice lost its extended lock (PTTL %s)", bucket, ttl)
			}
		}
		if b.scheds[0].Running() != 0 {
			t.Fatalf("running %d after Stop", b.scheds[0].Running())
		}
	})
}
