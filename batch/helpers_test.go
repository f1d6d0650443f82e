package batch_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/tockd/tock/api"
	"github.com/tockd/tock/batch"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql and the MySQL driver close their goroutines asynchronously.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		// ants starts its default pool in its package init (imported through api's
		// compensator and the executor): not a leak of these tests.
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}

// t0 is the fake clock's start: 2026-11-21T09:00:00Z.
var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

// waitBound bounds every real-time wait; generous: the race detector, a busy machine and a
// 10,000-task batch may meet.
const waitBound = 5 * time.Minute

// runner is one batch.Batch (one "instance") with its clock, metrics, logs and, when built
// with the API, the engine hook the API tells.
type runner struct {
	b     *batch.Batch
	clock *clockwork.FakeClock
	reg   *prometheus.Registry
	logs  *syncBuffer
	hook  *countingHook
	api   *api.API
}

type runnerOpts struct {
	cfg      batch.Config
	instance string
	clock    *clockwork.FakeClock
	hook     *countingHook
	// engine, when set, is the hook the API tells instead of hook.
	engine    api.EngineHook
	realClock bool // run on the real clock (for timings); clock is then unused
	noAPI     bool // register no timer operations (tests register their own)
}

func newRunner(t testing.TB, s batch.Store, o runnerOpts) *runner {
	t.Helper()
	r := &runner{clock: o.clock, reg: prometheus.NewRegistry(), logs: &syncBuffer{}, hook: o.hook}
	if r.clock == nil {
		r.clock = clockwork.NewFakeClockAt(t0)
	}
	if r.hook == nil {
		r.hook = newCountingHook()
	}
	var clk clockwork.Clock = r.clock
	if o.realClock {
		clk = clockwork.NewRealClock()
	}
	var engine api.EngineHook = r.hook
	if o.engine != nil {
		engine = o.engine
	}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := batch.New(o.cfg, batch.Deps{Store: s, Clock: clk, Log: log, Registerer: r.reg, Instance: o.instance})
	if err != nil {
		t.Fatal(err)
	}
	r.b = b
	if !o.noAPI {
		ds, ok := s.(*dao.Store)
		if !ok {
			t.Fatalf("the API needs a *dao.Store, got %T", s)
		}
		r.api = api.New(api.Deps{Store: ds, Clock: clk, Engine: engine, Log: log, Batches: b})
	}
	return r
}

// start runs the runner until the test ends (Stop in Cleanup); it returns the context's
// cancel, the abrupt stop.
func (r *runner) start(t testing.TB) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.b.Stop()
		cancel()
	})
	return cancel
}

// waitBatch polls the batch (Get aggregates its status) until cond holds.
func waitBatch(t testing.TB, b *batch.Batch, id int64, what string, cond func(dao.BatchJob, batch.Counts) bool) (dao.BatchJob, batch.Counts) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for {
		j, c, err := b.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("get batch %d: %v", id, err)
		}
		if cond(j, c) {
			return j, c
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %d: timed out waiting for %s; status %s, counts %v", id, what, j.Status, c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitStatus(t testing.TB, b *batch.Batch, id int64, status string) (dao.BatchJob, batch.Counts) {
	t.Helper()
	return waitBatch(t, b, id, "status "+status, func(j dao.BatchJob, _ batch.Counts) bool {
		return j.Status == status && batch.Finished(j)
	})
}

// waitFor polls cond until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// seedTimers inserts n timers of app in bulk (a few statements, not n round trips) and
// returns them as stored. Every tenth is disabled and they differ in callback and retry, so a
// rollback has something to get wrong.
func seedTimers(t testing.TB, s *dao.Store, app string, n int) []dao.Timer {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	const chunk = 500
	for start := 0; start < n; start += chunk {
		var q strings.Builder
		q.WriteString(`INSERT INTO timer (app, name, live_name, status, schedule, anchor_ms, callback, retry,
		request_hash, version, created_ms, updated_ms) VALUES `)
		var args []any
		for i := start; i < min(n, start+chunk); i++ {
			if i > start {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, '', 1, ?, ?)")
			name := fmt.Sprintf("t-%05d", i)
			status := dao.StatusEnabled
			if i%10 == 9 {
				status = dao.StatusDisabled
			}
			cb := dao.Callback{URL: fmt.Sprintf("http://127.0.0.1:9/hook/%d", i), Method: "POST", TimeoutMS: int64(1000 + i)}
			if i%3 == 0 {
				cb.Headers = map[string]string{"X-N": fmt.Sprint(i)}
			}
			args = append(args, app, name, name, status, dao.JSONSpec(schedule.Spec{Every: "1m"}), t0.UnixMilli(), cb,
				dao.RetryPolicy{MaxAttempts: 1 + i%5, BackoffMS: 1000, MaxBackoffMS: 60000}, t0.UnixMilli(), t0.UnixMilli())
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			t.Fatalf("seed timers: %v", err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return appTimers(t, s, app)
}

// appTimers returns every live timer of app, by id.
func appTimers(t testing.TB, s *dao.Store, app string) []dao.Timer {
	t.Helper()
	var all []dao.Timer
	var after int64
	for {
		page, err := s.ListTimers(context.Background(), dao.ListTimersParams{App: app, AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		after = page[len(page)-1].ID
	}
}

func allTasks(t testing.TB, s *dao.Store, batchID int64) []dao.BatchTask {
	t.Helper()
	var all []dao.BatchTask
	var after int64
	for {
		page, err := s.ListBatchTasks(context.Background(), dao.ListBatchTasksParams{BatchID: batchID, AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		after = page[len(page)-1].ID
	}
}

// countingHook is the engine hook: it counts the changes it is told of, per timer.
type countingHook struct {
	mu    sync.Mutex
	calls map[int64][]hookCall
}

type hookCall struct {
	before *dao.Timer
	after  dao.Timer
}

func newCountingHook() *countingHook { return &countingHook{calls: map[int64][]hookCall{}} }

func (h *countingHook) TimerChanged(_ context.Context, before *dao.Timer, after dao.Timer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if before != nil {
		c := *before
		before = &c
	}
	h.calls[after.ID] = append(h.calls[after.ID], hookCall{before, after})
	return nil
}

func (h *countingHook) of(id int64) []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookCall(nil), h.calls[id]...)
}

func (h *countingHook) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		n += len(c)
	}
	return n
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var _ io.Writer = (*syncBuffer)(nil)

// metric reads one series of reg: the counter, gauge or histogram count whose labels include
// labels; 0 when absent.
func metric(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
