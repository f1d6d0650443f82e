package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/conf"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
	"github.com/tockd/tock/schedule"
)

// Virtual-time tests of the whole pipeline: migrator -> miniredis -> scheduler -> trigger
// -> executor -> SQLite, calling a local HTTP receiver. The fake clock only moves when the
// harness has seen every engine goroutine park on it and no callback in flight, so each
// run is deterministic.

// arrival is one callback as the receiver saw it.
type arrival struct {
	key         string // Idempotency-Key
	timerID     int64
	scheduledMS int64
	scheduledAt string // Tock-Scheduled-At
	attempt     string
	at          time.Time // fake clock at arrival
}

type receiver struct {
	*httptest.Server
	clk      clockwork.Clock
	mu       sync.Mutex
	arrivals []arrival
}

func newReceiver(t *testing.T, clk clockwork.Clock) *receiver {
	r := &receiver{clk: clk}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		id, ms, _ := dao.ParseKey(req.Header.Get("Idempotency-Key"))
		r.mu.Lock()
		r.arrivals = append(r.arrivals, arrival{
			key: req.Header.Get("Idempotency-Key"), timerID: id, scheduledMS: ms,
			scheduledAt: req.Header.Get("Tock-Scheduled-At"), attempt: req.Header.Get("Tock-Attempt"),
			at: r.clk.Now(),
		})
		r.mu.Unlock()
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) of(timerID int64) []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []arrival
	for _, a := range r.arrivals {
		if a.timerID == timerID {
			out = append(out, a)
		}
	}
	return out
}

type harness struct {
	clk     *clockwork.FakeClock
	redis   *indextest.Redis
	store   *dao.Store
	engines []*Engine
	rcv     *receiver
	seq     int
}

// newHarness builds n engines over one SQLite store and one miniredis, at start. wrap, when
// set, wraps the store each engine uses (to inject failures).
func newHarness(t *testing.T, start time.Time, n int, wrap func(engineStore) engineStore) *harness {
	t.Helper()
	clk := clockwork.NewFakeClockAt(start)
	h := &harness{clk: clk, redis: indextest.Miniredis(t, clk), store: daotest.SQLite(t)}
	h.rcv = newReceiver(t, clk)
	for i := range n {
		cfg := conf.Default()
		cfg.InstanceID = fmt.Sprint("engine-", i)
		cfg.Redis.KeyPrefix = h.redis.Prefix
		cfg.Engine.Buckets = 2
		cfg.Engine.PoolSize = 32
		cfg.HTTP.ShutdownTimeout = conf.Duration(5 * time.Second)
		var s engineStore = h.store
		if wrap != nil {
			s = wrap(s)
		}
		e, err := newEngine(cfg, s, h.redis.Client, clk, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		h.engines = append(h.engines, e)
		t.Cleanup(e.Stop)
	}
	return h
}

func (h *harness) start(t *testing.T) {
	t.Helper()
	for _, e := range h.engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// create stores an enabled timer and tells the engine, as the API does.
func (h *harness) create(t *testing.T, spec schedule.Spec, anchor time.Time) dao.Timer {
	t.Helper()
	h.seq++
	tm, _, err := h.store.CreateTimer(context.Background(), dao.Timer{
		App: "test", Name: fmt.Sprint("timer-", h.seq), Status: dao.StatusEnabled, Schedule: dao.JSONSpec(spec),
		AnchorMS: anchor.UnixMilli(), Callback: dao.Callback{URL: h.rcv.URL + "/hook", Method: http.MethodPost, TimeoutMS: 5000},
	}, h.clk.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.engines[0].TimerChanged(context.Background(), nil, tm); err != nil {
		t.Fatal(err)
	}
	return tm
}

// update writes a changed timer and tells the engine unless silent (an API whose hook
// failed): the executor's check alone must then keep the old definition from firing.
func (h *harness) update(t *testing.T, before dao.Timer, change func(*dao.Timer), silent bool) dao.Timer {
	t.Helper()
	after := before
	change(&after)
	ctx := context.Background()
	var err error
	if after.Status == dao.StatusDeleted {
		err = h.store.DeleteTimer(ctx, before.ID, h.clk.Now().UnixMilli())
		after.Version++
	} else {
		after, err = h.store.UpdateTimer(ctx, after, before.Version, h.clk.Now().UnixMilli())
	}
	if err != nil {
		t.Fatal(err)
	}
	if !silent {
		if err := h.engines[0].TimerChanged(ctx, &before, after); err != nil {
			t.Fatal(err)
		}
	}
	return after
}

func (h *harness) waiters() int {
	n := 0
	for _, e := range h.engines {
		if e.stopped {
			continue
		}
		n += 2 + e.sched.Running() // scheduler loop, migrator loop, one per trigger
		if e.poll != nil {
			n += 2 // retry poller loop, executor heartbeat ticker
		}
		if e.comp != nil {
			n++ // compensation loop
		}
	}
	return n
}

func (h *harness) busy() bool {
	for _, e := range h.engines {
		if e.exec.InFlight() > 0 {
			return true
		}
	}
	return false
}

// settle waits until every loop and trigger of every engine sleeps on the clock and no
// occurrence is in the executors.
func (h *harness) settle(t *testing.T) {
	t.Helper()
	limit := time.Now().Add(20 * time.Second)
	for time.Now().Before(limit) {
		want := h.waiters()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := h.clk.BlockUntilContext(ctx, want)
		cancel()
		if err == nil && !h.busy() && h.waiters() == want {
			return
		}
		if err == nil {
			time.Sleep(200 * time.Microsecond) // a callback in flight: do not spin
		}
	}
	t.Fatalf("engines did not settle at %s", h.clk.Now().Format(time.StampMilli))
}

// runTo advances the clock to target, stopping at every whole second and at each of stops.
func (h *harness) runTo(t *testing.T, target time.Time, stops ...time.Time) {
	t.Helper()
	sorted := slices.Clone(stops)
	slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
	for {
		h.settle(t)
		now := h.clk.Now()
		if !now.Before(target) {
			return
		}
		next := now.Truncate(time.Second).Add(time.Second)
		if target.Before(next) {
			next = target
		}
		if i, _ := slices.BinarySearchFunc(sorted, now, func(a, b time.Time) int { return a.Compare(b) }); i < len(sorted) {
			for i < len(sorted) && !sorted[i].After(now) {
				i++
			}
			if i < len(sorted) && sorted[i].Before(next) {
				next = sorted[i]
			}
		}
		h.redis.SetTime(next)
		h.clk.Advance(next.Sub(now))
	}
}

// occurrences lists the scheduled times of tm in [from, to], leaving out those before the
// timer was created (as the migrator does).
func occurrences(t *testing.T, tm dao.Timer, from, to time.Time) []time.Time {
	t.Helper()
	s, err := schedule.Parse(schedule.Spec(tm.Schedule), time.UnixMilli(tm.AnchorMS))
	if err != nil {
		t.Fatal(err)
	}
	if created := time.UnixMilli(tm.CreatedMS); s.Kind() != schedule.KindAt && created.After(from) {
		from = created
	}
	return schedule.Occurrences(s, from, to.Add(time.Millisecond), 100000)
}

// checkExactlyOnce asserts that tm's arrivals are exactly want, each once, with the right
// headers; onTime additionally requires each to arrive at its scheduled millisecond.
func checkExactlyOnce(t *testing.T, h *harness, tm dao.Timer, want []time.Time, onTime bool) {
	t.Helper()
	got := h.rcv.of(tm.ID)
	seen := map[int64]int{}
	for _, a := range got {
		seen[a.scheduledMS]++
		if a.key != dao.Key(tm.ID, a.scheduledMS) || a.attempt != "1" || a.scheduledAt != schedule.FormatTime(time.UnixMilli(a.scheduledMS)) {
			t.Errorf("timer %d: bad headers %+v", tm.ID, a)
		}
		if a.at.UnixMilli() < a.scheduledMS {
			t.Errorf("timer %d: %s arrived early at %s", tm.ID, a.scheduledAt, a.at.Format(time.StampMilli))
		}
		if onTime && a.at.UnixMilli() != a.scheduledMS {
			t.Errorf("timer %d: %s arrived at %s, not at its millisecond", tm.ID, a.scheduledAt, a.at.Format(time.StampMilli))
		}
	}
	for _, w := range want {
		if n := seen[w.UnixMilli()]; n != 1 {
			t.Errorf("timer %d: %s arrived %d times, want once", tm.ID, schedule.FormatTime(w), n)
		}
		delete(seen, w.UnixMilli())
	}
	for ms, n := range seen {
		t.Errorf("timer %d: unexpected %s arrived %d times", tm.ID, schedule.FormatTime(time.UnixMilli(ms)), n)
	}
}

var nine = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

func TestEngineVirtualTime(t *testing.T) {
	t.Parallel()

	t.Run("FiresEachOccurrenceAtItsMillisecondAcrossMinutes", func(t *testing.T) {
		t.Parallel()
		start := nine.Add(-3 * time.Second)
		h := newHarness(t, start, 1, nil)
		every := h.create(t, schedule.Spec{Every: "1500ms"}, start)
		cron := h.create(t, schedule.Spec{Cron: "*/2 * * * * *"}, start)
		berlin := h.create(t, schedule.Spec{Cron: "0 1 10 * * *", Timezone: "Europe/Berlin"}, start) // 09:01:00 UTC
		oneShot := h.create(t, schedule.Spec{At: schedule.FormatTime(nine.Add(750 * time.Millisecond))}, start)
		h.start(t)

		end := nine.Add(65 * time.Second)
		var stops []time.Time
		for _, tm := range []dao.Timer{every, cron, berlin, oneShot} {
			stops = append(stops, occurrences(t, tm, start, end)...)
		}
		h.runTo(t, end, stops...)

		checkExactlyOnce(t, h, every, occurrences(t, every, start, end), true)
		checkExactlyOnce(t, h, cron, occurrences(t, cron, start, end), true)
		checkExactlyOnce(t, h, berlin, []time.Time{nine.Add(time.Minute)}, true)
		checkExactlyOnce(t, h, oneShot, []time.Time{nine.Add(750 * time.Millisecond)}, true)
		got, err := h.store.GetTimer(context.Background(), oneShot.ID)
		if err != nil || got.Status != dao.StatusCompleted {
			t.Fatalf("one-shot after firing: %+v %v, want completed", got, err)
		}
		es, err := h.store.ListExecutions(context.Background(), dao.ListExecutionsParams{TimerID: every.ID})
		if err != nil || len(es) != len(occurrences(t, every, start, end)) {
			t.Fatalf("%d executions recorded (%v), want one per occurrence", len(es), err)
		}
		for _, e := range es {
			if e.Status != dao.ExecSucceeded || e.HTTPStatus != 200 || e.Owner != "engine-0" || e.StartedMS != e.ScheduledMS {
				t.Fatalf("execution %+v", e)
			}
		}
	})

	t.Run("SliceTaken40sLateFiresOverdueAtOnce", func(t *testing.T) {
		t.Parallel()
		start := nine.Add(40 * time.Second)
		h := newHarness(t, start, 1, nil)
		tm := h.create(t, schedule.Spec{Every: "5s"}, nine)
		h.start(t)
		end := nine.Add(50 * time.Second)
		h.runTo(t, end)
		checkExactlyOnce(t, h, tm, occurrences(t, tm, nine, end), false)
		for _, a := range h.rcv.of(tm.ID) {
			want := time.UnixMilli(a.scheduledMS)
			if want.Before(start) {
				want = start // overdue: at once when the slice is taken
			}
			if !a.at.Equal(want) {
				t.Errorf("%s arrived at %s, want %s", a.scheduledAt, a.at.Format(time.StampMilli), want.Format(time.StampMilli))
			}
		}
	})

	t.Run("ReRunsPreviousSliceWhenFirstRunDidNotComplete", func(t *testing.T) {
		t.Parallel()
		start := nine.Add(-time.Second)
		var clk clockwork.Clock
		// The store refuses timer 1's 09:00:10 claim until 09:01:28, past the first run's
		// deadline (09:01:27.5: the slice lease's hard expiry less half the lease): slice
		// 09:00 stays incomplete, its lock expires at 09:01:30 and the previous-slice pass
		// runs it again.
		var refused atomic.Int64
		storeBack := nine.Add(88 * time.Second)
		h := newHarness(t, start, 1, func(s engineStore) engineStore {
			return &flakyStore{engineStore: s, fail: func(p dao.ClaimParams) bool {
				if p.TimerID == 1 && p.ScheduledMS == nine.Add(10*time.Second).UnixMilli() && clk.Now().Before(storeBack) {
					refused.Add(1)
					return true
				}
				return false
			}}
		})
		clk = h.clk
		tm := h.create(t, schedule.Spec{Every: "10s"}, nine)
		if tm.ID != 1 {
			t.Fatalf("first timer has id %d", tm.ID)
		}
		h.start(t)
		end := nine.Add(95 * time.Second)
		h.runTo(t, end)

		checkExactlyOnce(t, h, tm, occurrences(t, tm, nine, end), false)
		for _, a := range h.rcv.of(tm.ID) {
			want := time.UnixMilli(a.scheduledMS)
			if a.scheduledMS == nine.Add(10*time.Second).UnixMilli() {
				want = nine.Add(90 * time.Second)
			}
			if !a.at.Equal(want) {
				t.Errorf("%s arrived at %s, want %s", a.scheduledAt, a.at.Format(time.StampMilli), want.Format(time.StampMilli))
			}
		}
		if refused.Load() < 10 {
			t.Fatalf("claim refused %d times, want retries every second of the first run", refused.Load())
		}
		lock := index.NewKeys(h.redis.Prefix, 2).SliceLock(index.SliceAt(nine, index.NewKeys("", 2).Bucket(tm.ID)))
		if ttl := h.redis.Client.PTTL(context.Background(), lock).Val(); ttl < time.Minute {
			t.Fatalf("re-run slice lock PTTL %s, want extended once complete", ttl)
		}
	})

	// No occurrence of the old definition fires after a change: with the engine told (the
	// occurrences are unstamped) and without (the executor's check catches them).
	for _, tc := range []struct {
		name   string
		change func(*dao.Timer)
		keep   func(ms int64) bool // occurrences of the new definition
	}{
		{"Disable", func(t *dao.Timer) { t.Status = dao.StatusDisabled }, func(int64) bool { return false }},
		{"Delete", func(t *dao.Timer) { t.Status = dao.StatusDeleted }, func(int64) bool { return false }},
		{"Reschedule", func(t *dao.Timer) { t.Schedule = dao.JSONSpec(schedule.Spec{Every: "3s"}) },
			func(ms int64) bool { return (ms-nine.UnixMilli())%3000 == 0 }},
	} {
		for _, silent := range []bool{false, true} {
			name := tc.name
			if silent {
				name += "WithoutHook"
			}
			t.Run(name+"StopsOldDefinition", func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, nine, 1, nil)
				tm := h.create(t, schedule.Spec{Every: "1s"}, nine)
				h.start(t)
				changeAt := nine.Add(20*time.Second + 500*time.Millisecond)
				h.runTo(t, changeAt)
				h.update(t, tm, tc.change, silent)
				end := nine.Add(70 * time.Second)
				h.runTo(t, end)
				var want []time.Time
				for _, o := range occurrences(t, tm, nine, end) {
					if o.Before(changeAt) || tc.keep(o.UnixMilli()) {
						want = append(want, o)
					}
				}
				checkExactlyOnce(t, h, tm, want, true)
			})
		}
	}

	t.Run("RebuildsAfterRedisEmptied", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nine, 1, nil)
		tm := h.create(t, schedule.Spec{Every: "1s"}, nine)
		h.start(t)
		h.runTo(t, nine.Add(30*time.Second+500*time.Millisecond))
		h.redis.Mini.FlushAll()
		end := nine.Add(90 * time.Second)
		h.runTo(t, end)
		// Nothing lost, nothing twice; once the marker check (every 10 s) has rebuilt the
		// window, everything is on time again.
		checkExactlyOnce(t, h, tm, occurrences(t, tm, nine, end), false)
		for _, a := range h.rcv.of(tm.ID) {
			if a.scheduledMS >= nine.Add(41*time.Second).UnixMilli() && a.at.UnixMilli() != a.scheduledMS {
				t.Errorf("%s arrived at %s after the rebuild", a.scheduledAt, a.at.Format(time.StampMilli))
			}
		}
		if h.redis.Client.Exists(context.Background(), index.NewKeys(h.redis.Prefix, 2).MigrateMarker(nine)).Val() != 1 {
			t.Fatal("window marker not set again")
		}
	})

	t.Run("TwoEnginesFireEveryOccurrenceOnce", func(t *testing.T) {
		t.Parallel()
		start := nine.Add(-2 * time.Second)
		h := newHarness(t, start, 2, nil)
		var timers []dao.Timer
		var stops []time.Time
		end := nine.Add(70 * time.Second)
		for i := range 8 {
			tm := h.create(t, schedule.Spec{Every: strconv.Itoa(1+i%3) + "s"}, start.Add(time.Duration(i%4*250)*time.Millisecond))
			timers = append(timers, tm)
			stops = append(stops, occurrences(t, tm, start, end)...)
		}
		h.start(t)
		h.runTo(t, end, stops...)
		owners := map[string]int{}
		for _, tm := range timers {
			checkExactlyOnce(t, h, tm, occurrences(t, tm, start, end), true)
			es, err := h.store.ListExecutions(context.Background(), dao.ListExecutionsParams{TimerID: tm.ID, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				owners[e.Owner]++
			}
		}
		t.Logf("executions per instance: %v", owners)
	})

	t.Run("StopReleasesLocksAndIsIdempotent", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, nine, 1, nil)
		h.create(t, schedule.Spec{Every: "1s"}, nine)
		h.start(t)
		h.runTo(t, nine.Add(10*time.Second))
		done := make(chan struct{})
		go func() {
			h.engines[0].Stop()
			h.engines[0].Stop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Stop did not return")
		}
		keys := index.NewKeys(h.redis.Prefix, 2)
		for b := range 2 {
			if n := h.redis.Client.Exists(context.Background(), keys.SliceLock(index.Slice{Start: nine, Bucket: b})).Val(); n != 0 {
				t.Errorf("bucket %d: lock of the interrupted current slice still held after Stop", b)
			}
		}
		if err := h.engines[0].Start(context.Background()); err == nil {
			t.Fatal("Start after Stop succeeded")
		}
	})
}

// flakyStore fails the claims fail selects, as a store that is down would.
type flakyStore struct {
	engineStore
	fail func(dao.ClaimParams) bool
}

func (f *flakyStore) ClaimExecution(ctx context.Context, p dao.ClaimParams) (dao.Execution, bool, error) {
	if f.fail(p) {
		return dao.Execution{}, false, fmt.Errorf("flaky store: %w", context.DeadlineExceeded)
	}
	return f.engineStore.ClaimExecution(ctx, p)
}

var _ executor.Store = (*flakyStore)(nil)

// TestEngineRealServices runs the pipeline in real time against MariaDB and Redis: 100
// timers firing every second for about 5 s. Every occurrence due in that time arrives
// exactly once, none early; the test waits (up to a minute) for the late ones, so a loaded
// machine slows it down instead of failing it, and prints the lateness.
func TestEngineRealServices(t *testing.T) {
	r := indextest.RealRedis(t)
	store := daotest.MySQL(t)
	clk := clockwork.NewRealClock()
	rcv := newReceiver(t, clk)
	cfg := conf.Default()
	cfg.InstanceID = "real-1"
	cfg.Redis.KeyPrefix = r.Prefix
	cfg.Engine.PoolSize = 64
	// A short window keeps stamping light (an every-second timer has 10,800 occurrences in
	// the default 3 h); the pipeline is the same.
	cfg.Engine.MigrateStep = conf.Duration(time.Minute)
	cfg.Engine.MigrateWindow = conf.Duration(time.Minute)
	cfg.HTTP.ShutdownTimeout = conf.Duration(5 * time.Second)
	e, err := NewEngine(cfg, store, r.Client, clk, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	ctx := context.Background()
	var timers []dao.Timer
	for i := range 100 {
		now := clk.Now()
		tm, _, err := store.CreateTimer(ctx, dao.Timer{
			App: "real", Name: fmt.Sprint("every-second-", i), Status: dao.StatusEnabled,
			Schedule: dao.JSONSpec(schedule.Spec{Every: "1s"}), AnchorMS: now.UnixMilli(),
			Callback: dao.Callback{URL: rcv.URL, Method: http.MethodPost, TimeoutMS: 5000},
		}, now.UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.TimerChanged(ctx, nil, tm); err != nil {
			t.Fatal(err)
		}
		timers = append(timers, tm)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	startedAt := clk.Now()
	time.Sleep(5 * time.Second)
	endAt := clk.Now()

	want := map[string]bool{}
	for _, tm := range timers {
		for _, o := range occurrences(t, tm, time.UnixMilli(tm.AnchorMS), endAt) {
			want[dao.Key(tm.ID, o.UnixMilli())] = true
		}
	}
	arrived := func() map[string]int {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		n := map[string]int{}
		for _, a := range rcv.arrivals {
			n[a.key]++
		}
		return n
	}
	limit := time.Now().Add(time.Minute)
	for {
		n, missing := arrived(), 0
		for k := range want {
			if n[k] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(limit) {
			t.Errorf("%d of %d occurrences due by the end had not arrived a minute later", missing, len(want))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.Stop()

	var late []time.Duration
	rcv.mu.Lock()
	all := slices.Clone(rcv.arrivals)
	rcv.mu.Unlock()
	for _, a := range all {
		lateness := a.at.Sub(time.UnixMilli(a.scheduledMS))
		if lateness < 0 {
			t.Errorf("%s arrived %s early", a.key, -lateness)
		}
		if !time.UnixMilli(a.scheduledMS).Before(startedAt) && want[a.key] {
			late = append(late, lateness)
		}
	}
	for k, c := range arrived() {
		if c != 1 {
			t.Errorf("%s arrived %d times", k, c)
		}
	}
	if len(late) == 0 {
		t.Fatal("no callback due after the start arrived")
	}
	slices.Sort(late)
	pct := func(p float64) time.Duration { return late[int(p*float64(len(late)-1))] }
	t.Logf("%d occurrences due, %d of them after the start (creating the timers took %s); lateness of those p50 %s, p90 %s, p99 %s, max %s",
		len(want), len(late), startedAt.Sub(time.UnixMilli(timers[0].CreatedMS)).Round(time.Millisecond),
		pct(0.5), pct(0.9), pct(0.99), late[len(late)-1])
}
