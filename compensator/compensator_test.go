package compensator_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/tockd/tock/compensator"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/schedule"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(),
		// database/sql and the HTTP transport keep pool goroutines that end after Close.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

var quiet = slog.New(slog.DiscardHandler)

// t0 is a whole hour: 2026-01-01T00:00:00Z.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ---- timing rules, with in-memory fakes ----

type fakeStore struct {
	mu    sync.Mutex
	stuck int // executions ListStuckExecutions reports
	calls int
}

func (f *fakeStore) ListStuckExecutions(context.Context, int64, int) ([]dao.Execution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	out := make([]dao.Execution, f.stuck)
	for i := range out {
		out[i] = dao.Execution{ID: int64(i + 1), TimerID: int64(i + 1), ScheduledMS: 1, Status: dao.ExecRunning}
	}
	return out, nil
}
func (f *fakeStore) setStuck(n int) { f.mu.Lock(); f.stuck = n; f.mu.Unlock() }
func (f *fakeStore) ListSlicesDone(context.Context, int64, int64) ([]dao.SliceDone, error) {
	return nil, nil
}
func (f *fakeStore) SliceDoneBounds(context.Context) (int64, int64, bool, error) {
	return 0, 0, false, nil
}
func (f *fakeStore) MarkSliceDone(context.Context, dao.SliceDone) error    { return nil }
func (f *fakeStore) PruneSlicesDone(context.Context, int64) (int64, error) { return 0, nil }
func (f *fakeStore) ListEnabledTimers(context.Context, int64, int) ([]dao.Timer, error) {
	return nil, nil
}
func (f *fakeStore) ExistingOccurrences(context.Context, []int64, int64, int64) ([]dao.Occurrence, error) {
	return nil, nil
}
func (f *fakeStore) RecordMissed(context.Context, dao.MissedParams) (bool, error) { return true, nil }

type fakeExec struct{ n atomic.Int64 }

func (f *fakeExec) Submit(_ context.Context, occ executor.Occurrence, done func(executor.Result)) error {
	f.n.Add(1)
	done(executor.Result{Occurrence: occ, Outcome: executor.Skipped})
	return nil
}

func TestTimingRules(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := clockwork.NewFakeClockAt(t0)
	st := &fakeStore{}
	c, err := compensator.New(compensator.Config{
		InstanceID: "i1", Grace: 10 * time.Minute, Quiet: time.Minute,
		FastInterval: 10 * time.Second, SlowInterval: 10 * time.Minute, Clock: clk, Logger: quiet,
	}, compensator.Deps{Store: st, Executor: &fakeExec{}, Keys: index.NewKeys("t:", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	// advanceTo moves the clock and waits until the loop parks on its timer again.
	advanceTo := func(at time.Time) compensator.Status {
		t.Helper()
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(at.Sub(clk.Now()))
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		return c.Status()
	}
	expect := func(st compensator.Status, passes int, kind string, interval time.Duration) {
		t.Helper()
		if st.Passes != passes || st.Interval != interval || (kind != "" && (st.LastPass == nil || st.LastPass.Kind != kind)) {
			t.Fatalf("at %s: passes %d interval %s last %+v; want passes %d kind %q interval %s",
				clk.Now().Format(time.TimeOnly), st.Passes, st.Interval, st.LastPass, passes, kind, interval)
		}
	}

	// Catch-up runs half a minute into the first minute, not at once and not after the grace.
	expect(advanceTo(t0.Add(29*time.Second)), 0, "", 10*time.Second)
	expect(advanceTo(t0.Add(30*time.Second)), 1, compensator.KindCatchUp, 10*time.Minute)

	// Grace: no scheduled pass before 10 minutes of uptime.
	s := advanceTo(t0.Add(10*time.Minute - time.Second))
	expect(s, 1, "", 10*time.Minute)
	if s.Uptime != 10*time.Minute-time.Second || !s.NextPassAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("status = %+v", s)
	}
	// First scheduled pass finds nothing: slow interval (10m).
	expect(advanceTo(t0.Add(10*time.Minute)), 2, compensator.KindScheduled, 10*time.Minute)
	expect(advanceTo(t0.Add(19*time.Minute+59*time.Second)), 2, "", 10*time.Minute)

	// Work appears: the next pass finds it and the interval drops to fast (10s).
	st.setStuck(2)
	s = advanceTo(t0.Add(20 * time.Minute))
	expect(s, 3, compensator.KindScheduled, 10*time.Second)
	if s.LastPass.Stuck != 2 || s.LastPass.Redriven != 2 || s.LastPass.Skipped != 2 {
		t.Fatalf("last pass = %+v", s.LastPass)
	}
	expect(advanceTo(t0.Add(20*time.Minute+10*time.Second)), 4, "", 10*time.Second)

	// A takeover: nothing for a minute (quiet period), though the fast interval is due.
	clk.Advance(5 * time.Second) // 20:15, before the timer at 20:20
	c.NoteTakeover()
	expect(advanceTo(t0.Add(20*time.Minute+20*time.Second)), 4, "", 10*time.Second)
	expect(advanceTo(t0.Add(21*time.Minute+14*time.Second)), 4, "", 10*time.Second)
	st.setStuck(0)
	s = advanceTo(t0.Add(21*time.Minute + 15*time.Second))
	expect(s, 5, compensator.KindScheduled, 10*time.Minute) // found none: back to slow
	if !s.LastTakeover.Equal(t0.Add(20*time.Minute + 15*time.Second)) {
		t.Fatalf("last takeover = %s", s.LastTakeover)
	}
	expect(advanceTo(t0.Add(31*time.Minute+14*time.Second)), 5, "", 10*time.Minute)
	expect(advanceTo(t0.Add(31*time.Minute+15*time.Second)), 6, compensator.KindScheduled, 10*time.Minute)

	// A manual pass runs at once, whatever the timing.
	st.setStuck(1)
	rep, err := c.RunNow(ctx)
	if err != nil || rep.Kind != compensator.KindManual || rep.Stuck != 1 {
		t.Fatalf("RunNow = %+v, %v", rep, err)
	}
	if s := c.Status(); s.Passes != 7 || s.Interval != 10*time.Second {
		t.Fatalf("after RunNow: %+v", s)
	}
	c.Stop()
	c.Stop() // idempotent
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	deps := compensator.Deps{Store: &fakeStore{}, Executor: &fakeExec{}, Keys: index.NewKeys("t:", 1)}
	if _, err := compensator.New(compensator.Config{}, deps); err == nil {
		t.Error("no InstanceID: want error")
	}
	if _, err := compensator.New(compensator.Config{InstanceID: "i"}, compensator.Deps{}); err == nil {
		t.Error("no deps: want error")
	}
	if _, err := compensator.New(compensator.Config{InstanceID: "i", FastInterval: time.Hour, SlowInterval: time.Minute}, deps); err == nil {
		t.Error("slow < fast: want error")
	}
}

// ---- against the stores (SQLite and MariaDB) with the real executor ----

// receiver counts callbacks per Idempotency-Key.
type receiver struct {
	mu   sync.Mutex
	hits map[string]int
	srv  *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{hits: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.hits[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) total() (calls, keys int, dup bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.hits {
		calls += n
		dup = dup || n > 1
	}
	return calls, len(r.hits), dup
}

type bundle struct {
	store *dao.Store
	clk   *clockwork.FakeClock
	comp  *compensator.Compensator
	recv  *receiver
	keys  index.Keys
}

func setup(t *testing.T, s *dao.Store, now time.Time) *bundle {
	t.Helper()
	b := &bundle{store: s, clk: clockwork.NewFakeClockAt(now), recv: newReceiver(t), keys: index.NewKeys("t:", 2)}
	ex, err := executor.New(executor.Config{InstanceID: "i1", PoolSize: 8, Clock: b.clk, Logger: quiet}, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	b.comp, err = compensator.New(compensator.Config{InstanceID: "i1", Clock: b.clk, Rate: 1000, Logger: quiet},
		compensator.Deps{Store: s, Executor: ex, Keys: b.keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bundle) timer(t *testing.T, name, every, misfire string, createdAt time.Time) dao.Timer {
	t.Helper()
	tm, _, err := b.store.CreateTimer(context.Background(), dao.Timer{
		App: "a", Name: name, Status: dao.StatusEnabled,
		Schedule: dao.JSONSpec(schedule.Spec{Every: every}), AnchorMS: createdAt.UnixMilli(),
		Callback: dao.Callback{URL: b.recv.srv.URL, Method: "POST", TimeoutMS: 5000},
		Retry:    dao.RetryPolicy{MaxAttempts: 1, BackoffMS: 1000, MaxBackoffMS: 1000},
		Misfire:  misfire,
	}, createdAt.UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// markDone records every bucket's slices in [from, to) as completed, except skip.
func (b *bundle) markDone(t testing.TB, from, to time.Time, skip ...index.Slice) {
	t.Helper()
	skipped := map[index.Slice]bool{}
	for _, s := range skip {
		skipped[s] = true
	}
	for m := from; m.Before(to); m = m.Add(time.Minute) {
		for bk := range b.keys.Buckets() {
			sl := index.Slice{Start: m, Bucket: bk}
			if !skipped[sl] {
				b.comp.RecordSliceDone(context.Background(), sl)
			}
		}
	}
}

func (b *bundle) statuses(t *testing.T, timerID int64) map[string]int {
	t.Helper()
	es, err := b.store.ListExecutions(context.Background(), dao.ListExecutionsParams{TimerID: timerID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range es {
		out[e.Status]++
	}
	return out
}

func TestRedrivesStuckExecutionExactlyOnce(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		b := setup(t, s, t0)
		tm := b.timer(t, "x", "1m", "", t0.Add(-time.Hour))
		occ := t0.Add(-30 * time.Minute).UnixMilli()
		// Claimed by this instance, then the process lost track of it (no result recorded).
		if _, ok, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: tm.ID, ScheduledMS: occ, TimerVersion: tm.Version, Owner: "i1", NowMS: t0.UnixMilli()}); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}

		// Not stuck yet: 1m59s unchanged.
		b.clk.Advance(2*time.Minute - time.Second)
		rep, err := b.comp.RunOnce(ctx, b.clk.Now())
		if err != nil || rep.Stuck != 0 {
			t.Fatalf("before threshold: %+v, %v", rep, err)
		}
		b.clk.Advance(time.Second)
		rep, err = b.comp.RunOnce(ctx, b.clk.Now())
		if err != nil || rep.Stuck != 1 || rep.Redriven != 1 || rep.Succeeded != 1 {
			t.Fatalf("at threshold: %+v, %v", rep, err)
		}
		rep, err = b.comp.RunOnce(ctx, b.clk.Now().Add(time.Minute))
		if err != nil || rep.Found() != 0 {
			t.Fatalf("after: %+v, %v", rep, err)
		}
		if calls, _, _ := b.recv.total(); calls != 1 {
			t.Fatalf("callbacks = %d, want 1", calls)
		}
		if st := b.statuses(t, tm.ID); st[dao.ExecSucceeded] != 1 || len(st) != 1 {
			t.Fatalf("statuses = %v", st)
		}
	})
}

func TestFiresOccurrencesWithNoExecutionOnlyInUndoneSlices(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		now := t0.Add(2 * time.Hour)
		b := setup(t, s, now)
		tm := b.timer(t, "ten-seconds", "10s", "", t0)
		lost := index.Slice{Start: now.Add(-20 * time.Minute), Bucket: b.keys.Bucket(tm.ID)}
		// Every slice of the last 90 minutes completed except lost: the timer's occurrences
		// of the completed slices have no rows either, but those slices must not be scanned.
		b.markDone(t, now.Add(-90*time.Minute), now, lost)

		rep, err := b.comp.RunOnce(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if rep.SlicesScanned != 1 || rep.Missing != 6 || rep.Redriven != 6 || rep.Succeeded != 6 || rep.Missed != 0 {
			t.Fatalf("report = %+v; want 1 slice scanned, 6 missing fired", rep)
		}
		calls, keys, dup := b.recv.total()
		if calls != 6 || keys != 6 || dup {
			t.Fatalf("callbacks = %d over %d keys (dup %v), want 6 distinct", calls, keys, dup)
		}
		b.recv.mu.Lock()
		for k := range b.recv.hits {
			_, ms, _ := dao.ParseKey(k)
			if ms < lost.Start.UnixMilli() || ms >= lost.End().UnixMilli() {
				t.Errorf("fired %s outside the undone slice", k)
			}
		}
		b.recv.mu.Unlock()

		// The slice is now recorded done: the next pass scans nothing and fires nothing.
		rep, err = b.comp.RunOnce(ctx, now.Add(10*time.Second))
		if err != nil || rep.SlicesScanned != 0 || rep.Found() != 0 {
			t.Fatalf("second pass = %+v, %v", rep, err)
		}
		if calls, _, _ := b.recv.total(); calls != 6 {
			t.Fatalf("callbacks after second pass = %d, want 6", calls)
		}
	})
}

func TestNoHistoryNoScan(t *testing.T) {
	t.Parallel()
	b := setup(t, daotest.SQLite(t), t0.Add(time.Hour))
	b.timer(t, "x", "10s", "", t0)
	rep, err := b.comp.RunOnce(context.Background(), b.clk.Now())
	if err != nil || rep.SlicesScanned != 0 || rep.Found() != 0 {
		t.Fatalf("pass without any slice record = %+v, %v", rep, err)
	}
}

func TestCatchUpMisfirePolicies(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		// Every instance was down from 10:00 to 11:30; the window is 1h.
		down := t0.Add(10 * time.Hour)
		now := down.Add(90 * time.Minute)
		b := setup(t, s, now)
		created := down.Add(-time.Hour)
		all := b.timer(t, "all", "5m", dao.MisfireFireAll, created)
		once := b.timer(t, "once", "5m", dao.MisfireFireOnce, created)
		skip := b.timer(t, "skip", "5m", dao.MisfireSkip, created)
		b.markDone(t, down.Add(-20*time.Minute), down)

		rep, err := b.comp.CatchUp(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		// Occurrences 10:00..11:25 every 5 minutes: 18 per timer, but the scan stops at the
		// settled end (slices starting before 11:28), so 11:25 is included: 18 per timer.
		// 10:00..10:25 (6) are older than the window (from 10:30): missed whatever the policy.
		// In the window 10:30..11:25 (12): all fire 12; once fires 1 (11:25); skip fires 0.
		want := map[int64]map[string]int{
			all.ID:  {dao.ExecMissed: 6, dao.ExecSucceeded: 12},
			once.ID: {dao.ExecMissed: 17, dao.ExecSucceeded: 1},
			skip.ID: {dao.ExecMissed: 18},
		}
		for id, w := range want {
			got := b.statuses(t, id)
			if len(got) != len(w) || got[dao.ExecMissed] != w[dao.ExecMissed] || got[dao.ExecSucceeded] != w[dao.ExecSucceeded] {
				t.Errorf("timer %d statuses = %v, want %v", id, got, w)
			}
		}
		es, err := s.ListExecutions(ctx, dao.ListExecutionsParams{TimerID: once.ID, Status: dao.ExecSucceeded})
		if err != nil || len(es) != 1 || es[0].ScheduledMS != down.Add(85*time.Minute).UnixMilli() {
			t.Fatalf("fire_once fired %+v, %v; want only 11:25", es, err)
		}
		if rep.Missing != 54 || rep.Redriven != 13 || rep.Missed != 41 {
			t.Fatalf("report = %+v", rep)
		}
		if calls, keys, dup := b.recv.total(); calls != 13 || keys != 13 || dup {
			t.Fatalf("callbacks = %d over %d keys (dup %v), want 13", calls, keys, dup)
		}

		// Everything is settled: a later pass finds nothing and fires nothing more.
		b.clk.Advance(time.Minute)
		rep, err = b.comp.RunOnce(ctx, b.clk.Now())
		if err != nil || rep.Found() != 0 {
			t.Fatalf("after catch-up: %+v, %v", rep, err)
		}
		if calls, _, _ := b.recv.total(); calls != 13 {
			t.Fatalf("callbacks = %d, want 13", calls)
		}
	})
}

func TestMaxPerPassDefersAndKeepsFast(t *testing.T) {
	t.Parallel()
	s := daotest.SQLite(t)
	now := t0.Add(2 * time.Hour)
	clk := clockwork.NewFakeClockAt(now)
	recv := newReceiver(t)
	ex, err := executor.New(executor.Config{InstanceID: "i1", PoolSize: 4, Clock: clk, Logger: quiet}, s)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Stop()
	keys := index.NewKeys("t:", 1)
	c, err := compensator.New(compensator.Config{InstanceID: "i1", Clock: clk, MaxPerPass: 4, Rate: 1000, Logger: quiet},
		compensator.Deps{Store: s, Executor: ex, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{store: s, clk: clk, comp: c, recv: recv, keys: keys}
	b.timer(t, "x", "10s", "", t0)
	lost := index.Slice{Start: now.Add(-10 * time.Minute), Bucket: 0}
	b.markDone(t, now.Add(-70*time.Minute), now, lost)

	rep, err := c.RunOnce(context.Background(), now)
	if err != nil || rep.Redriven != 4 || rep.Deferred != 2 || c.Status().Interval != compensator.DefaultFastInterval {
		t.Fatalf("first pass = %+v, %v, interval %s", rep, err, c.Status().Interval)
	}
	rep, err = c.RunOnce(context.Background(), now.Add(10*time.Second))
	if err != nil || rep.Missing != 2 || rep.Redriven != 2 || rep.Deferred != 0 {
		t.Fatalf("second pass = %+v, %v", rep, err)
	}
	if calls, keys, dup := recv.total(); calls != 6 || keys != 6 || dup {
		t.Fatalf("callbacks = %d over %d keys (dup %v), want 6", calls, keys, dup)
	}
}
