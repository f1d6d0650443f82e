package trigger_test

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
	"github.com/tockd/tock/trigger"
)

// IgnoreCurrent: ants (imported via executor) starts its default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

var sliceStart = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

// fakeIndex is a slice in memory.
type fakeIndex struct {
	mu  sync.Mutex
	occ map[index.Occurrence]bool
	seq int64
}

func (f *fakeIndex) Seq(context.Context, index.Slice) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq, nil
}

func (f *fakeIndex) add(ms ...int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range ms {
		f.occ[index.Occurrence{TimerID: 1, ScheduledMS: m}] = true
	}
	f.seq++
}

func (f *fakeIndex) remove(ms int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.occ, index.Occurrence{TimerID: 1, ScheduledMS: ms})
	f.seq++
}

func (f *fakeIndex) Read(context.Context, index.Slice) ([]index.Occurrence, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []index.Occurrence
	for o := range f.occ {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b index.Occurrence) int { return int(a.ScheduledMS - b.ScheduledMS) })
	return out, 0, nil
}

type submission struct {
	occ executor.Occurrence
	at  time.Time
}

// fakeExec records submissions with the clock's time and answers with outcome (nil:
// succeeded; hold: never answers).
type fakeExec struct {
	clk     clockwork.Clock
	subs    chan submission
	mu      sync.Mutex
	outcome func(executor.Occurrence) executor.Outcome
	held    []func(executor.Result)
}

const hold executor.Outcome = "hold"

func (f *fakeExec) Submit(_ context.Context, occ executor.Occurrence, done func(executor.Result)) error {
	f.subs <- submission{occ: occ, at: f.clk.Now()}
	f.mu.Lock()
	out := executor.Succeeded
	if f.outcome != nil {
		out = f.outcome(occ)
	}
	if out == hold {
		f.held = append(f.held, done)
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	done(executor.Result{Occurrence: occ, Outcome: out})
	return nil
}

func (f *fakeExec) setOutcome(fn func(executor.Occurrence) executor.Outcome) {
	f.mu.Lock()
	f.outcome = fn
	f.mu.Unlock()
}

type testBundle struct {
	clk    *clockwork.FakeClock
	idx    *fakeIndex
	exec   *fakeExec
	result chan trigger.Summary
	ended  chan struct{} // closed when Run returns
	cancel context.CancelFunc
}

// setup starts a trigger for the slice at sliceStart with the clock at start.
func setup(t *testing.T, start time.Time, deadline time.Time, stamped ...int64) *testBundle {
	t.Helper()
	return setupLead(t, start, deadline, 0, stamped...)
}

// setupLead is setup with the trigger's Lead.
func setupLead(t *testing.T, start time.Time, deadline time.Time, lead time.Duration, stamped ...int64) *testBundle {
	t.Helper()
	clk := clockwork.NewFakeClockAt(start)
	b := &testBundle{
		clk:    clk,
		idx:    &fakeIndex{occ: map[index.Occurrence]bool{}},
		exec:   &fakeExec{clk: clk, subs: make(chan submission, 1000)},
		result: make(chan trigger.Summary, 1),
		ended:  make(chan struct{}),
	}
	b.idx.add(stamped...)
	tr := trigger.New(trigger.Config{
		Slice:    index.Slice{Start: sliceStart, Bucket: 0},
		Deadline: deadline,
		Lead:     lead,
		Clock:    clk,
		Logger:   slog.New(slog.DiscardHandler),
	}, b.idx, b.exec)
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() {
		b.result <- tr.Run(ctx)
		close(b.ended)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.result:
		case <-time.After(10 * time.Second):
			t.Error("trigger did not stop")
		}
	})
	return b
}

// wait blocks until the trigger sleeps on the clock (or has ended).
func (b *testBundle) wait(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-b.ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := b.clk.BlockUntilContext(ctx, 1); err != nil {
		select {
		case <-b.ended:
		default:
			t.Fatal("trigger neither waits on the clock nor ended")
		}
	}
}

// advanceTo moves the clock to target once the trigger sleeps.
func (b *testBundle) advanceTo(t *testing.T, target time.Time) {
	t.Helper()
	b.wait(t)
	b.clk.Advance(target.Sub(b.clk.Now()))
	b.wait(t)
}

// summary waits (boundedly) for Run's result.
func (b *testBundle) summary(t *testing.T) trigger.Summary {
	t.Helper()
	select {
	case s := <-b.result:
		b.result <- s
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return trigger.Summary{}
	}
}

func (b *testBundle) submitted() []submission {
	var out []submission
	for {
		select {
		case s := <-b.exec.subs:
			out = append(out, s)
		default:
			return out
		}
	}
}

func ms(d time.Duration) int64 { return sliceStart.Add(d).UnixMilli() }

func TestTrigger(t *testing.T) {
	t.Parallel()
	farDeadline := sliceStart.Add(85 * time.Second)

	t.Run("FiresEachOccurrenceAtItsMillisecond", func(t *testing.T) {
		t.Parallel()
		dues := []time.Duration{1234 * time.Millisecond, 1235 * time.Millisecond, 30 * time.Second, 59999 * time.Millisecond}
		var stamped []int64
		for _, d := range dues {
			stamped = append(stamped, ms(d))
		}
		b := setup(t, sliceStart, farDeadline, stamped...)
		for _, d := range dues {
			due := sliceStart.Add(d)
			b.advanceTo(t, due.Add(-time.Millisecond))
			if got := b.submitted(); len(got) != 0 {
				t.Fatalf("fired %v 1ms before %s", got, due.Format(time.StampMilli))
			}
			b.advanceTo(t, due)
			got := b.submitted()
			if len(got) != 1 || got[0].occ.ScheduledMS != due.UnixMilli() || !got[0].at.Equal(due) {
				t.Fatalf("at %s: submitted %v, want that occurrence at that instant", due.Format(time.StampMilli), got)
			}
		}
	})

	t.Run("LeadHandsOverEachOccurrenceThatEarly", func(t *testing.T) {
		t.Parallel()
		const lead = 100 * time.Millisecond
		due := sliceStart.Add(1234 * time.Millisecond)
		b := setupLead(t, sliceStart, farDeadline, lead, due.UnixMilli())
		b.advanceTo(t, due.Add(-lead-time.Millisecond))
		if got := b.submitted(); len(got) != 0 {
			t.Fatalf("submitted %v more than the lead before its time", got)
		}
		b.advanceTo(t, due.Add(-lead))
		if got := b.submitted(); len(got) != 1 || !got[0].at.Equal(due.Add(-lead)) {
			t.Fatalf("submitted %v, want the occurrence exactly the lead before its time", got)
		}
	})

	t.Run("PicksUpOccurrencesStampedAfterStart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sliceStart, farDeadline)
		b.advanceTo(t, sliceStart.Add(2500*time.Millisecond))
		b.idx.add(ms(10 * time.Second))
		b.advanceTo(t, sliceStart.Add(10*time.Second))
		if got := b.submitted(); len(got) != 1 || !got[0].at.Equal(sliceStart.Add(10*time.Second)) {
			t.Fatalf("submitted %v, want the late-stamped occurrence at its time", got)
		}
	})

	t.Run("OverdueOccurrencesFireAtOnce", func(t *testing.T) {
		t.Parallel()
		start := sliceStart.Add(40 * time.Second)
		b := setup(t, start, farDeadline, ms(5*time.Second), ms(10*time.Second), ms(30*time.Second), ms(50*time.Second))
		b.wait(t)
		got := b.submitted()
		if len(got) != 3 {
			t.Fatalf("submitted %d at the late start, want the 3 overdue", len(got))
		}
		for _, s := range got {
			if !s.at.Equal(start) {
				t.Fatalf("overdue %v submitted at %v, want at once (%v)", s.occ, s.at, start)
			}
		}
		b.advanceTo(t, sliceStart.Add(50*time.Second))
		if got := b.submitted(); len(got) != 1 || !got[0].at.Equal(sliceStart.Add(50*time.Second)) {
			t.Fatalf("submitted %v, want the :50 occurrence at :50", got)
		}
	})

	t.Run("StampedShortlyBeforeDueFiresOnTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sliceStart, farDeadline)
		b.advanceTo(t, sliceStart.Add(2550*time.Millisecond))
		b.idx.add(ms(2800 * time.Millisecond)) // 250 ms ahead, between two full reads
		b.advanceTo(t, sliceStart.Add(2600*time.Millisecond))
		b.advanceTo(t, sliceStart.Add(2800*time.Millisecond))
		if got := b.submitted(); len(got) != 1 || !got[0].at.Equal(sliceStart.Add(2800*time.Millisecond)) {
			t.Fatalf("submitted %v, want the occurrence at its millisecond", got)
		}
	})

	t.Run("RemovedBeforeDueDoesNotFire", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sliceStart, farDeadline, ms(5*time.Second))
		b.advanceTo(t, sliceStart.Add(3*time.Second))
		b.idx.remove(ms(5 * time.Second))
		b.advanceTo(t, sliceStart.Add(4*time.Second)) // the poll re-reads
		b.advanceTo(t, sliceStart.Add(6*time.Second))
		if got := b.submitted(); len(got) != 0 {
			t.Fatalf("submitted %v after removal", got)
		}
	})

	t.Run("CompletesAfterGraceWhenAllRecorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sliceStart, farDeadline, ms(59*time.Second))
		b.advanceTo(t, sliceStart.Add(62*time.Second-time.Millisecond))
		select {
		case s := <-b.result:
			t.Fatalf("completed before end+grace: %+v", s)
		default:
		}
		b.advanceTo(t, sliceStart.Add(62*time.Second))
		s := b.summary(t)
		if !s.Complete || s.Succeeded != 1 || s.Pending != 0 {
			t.Fatalf("summary %+v, want complete with 1 succeeded", s)
		}
	})

	t.Run("IncompleteWhileResultPending", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sliceStart, farDeadline, ms(10*time.Second))
		b.exec.setOutcome(func(executor.Occurrence) executor.Outcome { return hold })
		for d := 11 * time.Second; d <= 85*time.Second; d += time.Second {
			b.advanceTo(t, sliceStart.Add(d))
		}
		s := b.summary(t)
		if s.Complete || s.Pending != 1 {
			t.Fatalf("summary %+v, want incomplete with 1 pending at the deadline", s)
		}
	})

	t.Run("UnrecordedIsRetriedAndBlocksCompletion", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sliceStart, farDeadline, ms(10*time.Second))
		var mu sync.Mutex
		down := true
		b.exec.setOutcome(func(executor.Occurrence) executor.Outcome {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return executor.Unrecorded
			}
			return executor.Succeeded
		})
		for d := 10 * time.Second; d <= 70*time.Second; d += 500 * time.Millisecond {
			b.advanceTo(t, sliceStart.Add(d))
		}
		select {
		case s := <-b.result:
			t.Fatalf("ended while the store is down: %+v", s)
		default:
		}
		if n := len(b.submitted()); n < 50 {
			t.Fatalf("unrecorded occurrence submitted %d times, want a retry per second", n)
		}
		mu.Lock()
		down = false
		mu.Unlock()
		// Within a second or two: retried, recorded, complete.
		for d := 70500 * time.Millisecond; d <= 73*time.Second; d += 500 * time.Millisecond {
			b.advanceTo(t, sliceStart.Add(d))
		}
		s := b.summary(t)
		if !s.Complete || s.Succeeded != 1 {
			t.Fatalf("summary %+v, want complete once recorded", s)
		}
	})

	t.Run("StaysIncompleteIfStillUnrecordedAtDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sliceStart, farDeadline, ms(10*time.Second))
		b.exec.setOutcome(func(executor.Occurrence) executor.Outcome { return executor.Unrecorded })
		for d := 10 * time.Second; d <= 85*time.Second; d += time.Second {
			b.advanceTo(t, sliceStart.Add(d))
		}
		s := b.summary(t)
		if s.Complete {
			t.Fatalf("summary %+v, want incomplete", s)
		}
	})

	t.Run("StopsPromptlyOnCancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sliceStart, farDeadline, ms(30*time.Second))
		b.wait(t)
		b.cancel()
		select {
		case s := <-b.result:
			b.result <- s
			if s.Complete {
				t.Fatal("cancelled run reported complete")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	})
}
