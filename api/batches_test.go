package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/batch"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/schedule"
)

// batchBundle is an API with batches over its own store (a batch runner works on every
// batch of its store, so tests do not share one).
type batchBundle struct {
	*testBundle
	batches *batch.Batch
}

type batchOpts struct {
	unstarted bool // create batches but run none
}

func setupBatches(t *testing.T, s *dao.Store, opts ...batchOpts) *batchBundle {
	t.Helper()
	var o batchOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	tb := &testBundle{store: s, dao: s, clock: clockwork.NewFakeClockAt(t0), hook: &fakeHook{}, logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(tb.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	bt, err := batch.New(batch.Config{Workers: 4}, batch.Deps{Store: s, Clock: tb.clock, Log: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	bb := &batchBundle{testBundle: tb, batches: bt}
	tb.api = New(Deps{Store: s, Clock: tb.clock, Engine: tb.hook, Log: log, Version: "test", Batches: bt})
	tb.h = tb.api.Handler()
	if !o.unstarted {
		ctx, cancel := context.WithCancel(context.Background())
		if err := bt.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			bt.Stop()
			cancel()
		})
	}
	return bb
}

// createBatch posts a batch and fails unless the answer is want.
func (b *batchBundle) createBatch(t *testing.T, body any, want int) Batch {
	t.Helper()
	r := b.do(t, http.MethodPost, "/api/v1/batches", body)
	r.wantStatus(t, want)
	var out Batch
	r.decode(t, &out)
	return out
}

// wait polls GET /batches/{id} until the batch has status and has finished.
func (b *batchBundle) wait(t *testing.T, id int64, status string) Batch {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var v Batch
		r := b.do(t, http.MethodGet, batchPath(id), nil)
		r.wantStatus(t, http.StatusOK)
		r.decode(t, &v)
		done := v.FinishedAt != nil
		if strings.HasPrefix(v.Status, "rollback_") {
			done = v.RollbackFinishedAt != nil
		}
		if v.Status == status && done {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %d: status %s counts %v, want %s", id, v.Status, v.Counts, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *batchBundle) tasks(t *testing.T, id int64, query string) List[BatchTask] {
	t.Helper()
	var l List[BatchTask]
	r := b.do(t, http.MethodGet, batchPath(id)+"/tasks"+query, nil)
	r.wantStatus(t, http.StatusOK)
	r.decode(t, &l)
	return l
}

func batchPath(id int64) string { return "/api/v1/batches/" + itoa(id) }

// timers creates n timers of app named t0..t<n-1>, every second one disabled.
func (b *batchBundle) timers(t *testing.T, app string, n int) []Timer {
	t.Helper()
	var out []Timer
	for i := range n {
		body := timerBody(app, fmt.Sprintf("t%d", i))
		body["enabled"] = i%2 == 0
		out = append(out, b.create(t, body, http.StatusCreated))
	}
	b.hook.take()
	return out
}

func (b *batchBundle) rows(t *testing.T, app string) []dao.Timer {
	t.Helper()
	ts, err := b.dao.ListTimers(context.Background(), dao.ListTimersParams{App: app, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestBatchRoutesOnlyWithBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, daotest.SQLite(t))
	b.do(t, http.MethodPost, "/api/v1/batches", `{}`).wantError(t, http.StatusNotFound, "not_found", "")
}

// Bad input gets a precise 4xx and changes nothing: no batch, no timer written, no engine
// call.
func TestBatchBadInput(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setupBatches(t, s)
		app := "bad"
		ts := b.timers(t, app, 3)
		id := ts[0].ID
		before := b.rows(t, app)
		manyIDs := make([]int64, MaxBatchIDs+1)
		for i := range manyIDs {
			manyIDs[i] = int64(i + 1)
		}
		for _, c := range []struct {
			name   string
			body   any
			status int
			code   string
			field  string
		}{
			{"NotJSON", `{"operation":`, 400, "invalid_json", ""},
			{"UnknownField", `{"operation":"disable","target":{"ids":[1],"foo":1}}`, 400, "unknown_field", "target.foo"},
			{"MissingOperation", map[string]any{"target": map[string]any{"ids": []int64{id}}}, 422, "missing_field", "operation"},
			{"UnknownOperation", map[string]any{"operation": "explode", "target": map[string]any{"ids": []int64{id}}}, 422, "unknown_operation", "operation"},
			{"MissingTarget", map[string]any{"operation": "disable"}, 422, "missing_field", "target"},
			{"EmptyTarget", map[string]any{"operation": "disable", "target": map[string]any{}}, 422, "empty_target", "target"},
			{"EmptyIDs", map[string]any{"operation": "disable", "target": map[string]any{"ids": []int64{}}}, 422, "empty_target", "target.ids"},
			{"IDsNotNumbers", `{"operation":"disable","target":{"ids":["1"]}}`, 400, "invalid_field", "target.ids"},
			{"IDZero", map[string]any{"operation": "disable", "target": map[string]any{"ids": []int64{0}}}, 422, "invalid_value", "target.ids"},
			{"TooManyIDs", map[string]any{"operation": "disable", "target": map[string]any{"ids": manyIDs}}, 422, "too_many_targets", "target.ids"},
			{"IDsAndSelector", map[string]any{"operation": "disable", "target": map[string]any{"ids": []int64{id}, "app": app}}, 422, "invalid_value", "target"},
			{"UnknownIDs", map[string]any{"operation": "disable", "target": map[string]any{"ids": []int64{id, id + 1000}}}, 422, "unknown_timers", "target.ids"},
			{"SelectorMatchesNothing", map[string]any{"operation": "disable", "target": map[string]any{"app": app, "name_prefix": "zzz"}}, 422, "no_match", "target"},
			{"SelectorUnknownApp", map[string]any{"operation": "disable", "target": map[string]any{"app": "nobody"}}, 422, "no_match", "target"},
			{"SelectorBadApp", map[string]any{"operation": "disable", "target": map[string]any{"app": "Bad App"}}, 422, "invalid_value", "target.app"},
			{"SelectorBadStatus", map[string]any{"operation": "disable", "target": map[string]any{"app": app, "status": "deleted"}}, 422, "invalid_value", "target.status"},
			{"SelectorWithoutApp", map[string]any{"operation": "disable", "target": map[string]any{"status": "enabled"}}, 422, "missing_field", "target.app"},
			{"PatchForDisable", map[string]any{"operation": "disable", "target": map[string]any{"app": app}, "patch": map[string]any{"name": "x"}}, 422, "invalid_value", "patch"},
			{"UpdateWithoutPatch", map[string]any{"operation": "update", "target": map[string]any{"app": app}}, 422, "missing_field", "patch"},
			{"UpdatePatchNotObject", `{"operation":"update","target":{"app":"bad"},"patch":[1]}`, 400, "invalid_field", "patch"},
			{"UpdatePatchUnknownField", map[string]any{"operation": "update", "target": map[string]any{"app": app}, "patch": map[string]any{"callback": map[string]any{"retries": 1}}}, 400, "unknown_field", "patch.callback.retries"},
			{"UpdatePatchName", map[string]any{"operation": "update", "target": map[string]any{"app": app}, "patch": map[string]any{"name": "same"}}, 422, "invalid_value", "patch.name"},
			{"UpdatePatchEmpty", map[string]any{"operation": "update", "target": map[string]any{"app": app}, "patch": map[string]any{}}, 422, "invalid_value", "patch"},
			{"UpdatePatchBadURL", map[string]any{"operation": "update", "target": map[string]any{"app": app}, "patch": map[string]any{"callback": map[string]any{"url": "ftp://x"}}}, 422, "invalid_url", "patch.callback.url"},
			{"UpdatePatchBadSchedule", map[string]any{"operation": "update", "target": map[string]any{"app": app}, "patch": map[string]any{"schedule": map[string]any{"cron": "bad"}}}, 422, "invalid_schedule", "patch.schedule.cron"},
			{"BadRequestID", map[string]any{"operation": "disable", "target": map[string]any{"app": app}, "request_id": " x"}, 422, "invalid_value", "request_id"},
		} {
			t.Run(c.name, func(t *testing.T) {
				b.do(t, http.MethodPost, "/api/v1/batches", c.body).wantError(t, c.status, c.code, c.field)
			})
		}
		var l List[Batch]
		b.do(t, http.MethodGet, "/api/v1/batches", nil).decode(t, &l)
		if len(l.Items) != 0 {
			t.Fatalf("refused requests created batches: %+v", l.Items)
		}

		t.Run("CancelOfAFinishedBatch", func(t *testing.T) {
			v := b.createBatch(t, map[string]any{"operation": "disable", "target": map[string]any{"ids": []int64{id}}}, 202)
			done := b.wait(t, v.ID, dao.BatchSuccess)
			b.do(t, http.MethodPost, batchPath(v.ID)+"/cancel", nil).wantError(t, 409, "batch_finished", "")
			if again := b.wait(t, v.ID, dao.BatchSuccess); again.UpdatedAt != done.UpdatedAt {
				t.Fatalf("refused cancel changed the batch: %+v", again)
			}
			b.do(t, http.MethodPost, batchPath(v.ID)+"/rollback", nil).wantStatus(t, 202)
			b.wait(t, v.ID, dao.BatchRollbackSuccess)
			b.do(t, http.MethodPost, batchPath(v.ID)+"/rollback", nil).wantError(t, 409, "batch_rolled_back", "")
			b.hook.take()
		})
		t.Run("UnknownBatch", func(t *testing.T) {
			for _, p := range []string{"/api/v1/batches/99999", "/api/v1/batches/99999/tasks", "/api/v1/batches/x"} {
				b.do(t, http.MethodGet, p, nil).wantError(t, 404, "not_found", "")
			}
			b.do(t, http.MethodPost, "/api/v1/batches/99999/cancel", nil).wantError(t, 404, "not_found", "")
			b.do(t, http.MethodPost, "/api/v1/batches/99999/rollback", nil).wantError(t, 404, "not_found", "")
		})
		t.Run("BadListQueries", func(t *testing.T) {
			b.do(t, http.MethodGet, "/api/v1/batches?status=done", nil).wantError(t, 400, "invalid_status", "status")
			b.do(t, http.MethodGet, "/api/v1/batches?app=B%20A", nil).wantError(t, 400, "invalid_app", "app")
			b.do(t, http.MethodGet, "/api/v1/batches?limit=0", nil).wantError(t, 400, "invalid_limit", "limit")
			b.do(t, http.MethodGet, "/api/v1/batches/1/tasks?status=done", nil).wantError(t, 400, "invalid_status", "status")
		})
		after := b.rows(t, app)
		for i := range before {
			// Only ts[0] went through the one accepted batch and its rollback.
			if before[i].ID != id && !reflectEqualTimer(before[i], after[i]) {
				t.Errorf("timer %d changed:\n%+v\n%+v", before[i].ID, before[i], after[i])
			}
		}
		if calls := b.hook.take(); len(calls) != 0 {
			t.Errorf("engine told of %d changes", len(calls))
		}
	})
}

func reflectEqualTimer(a, b dao.Timer) bool {
	return a.Version == b.Version && a.Status == b.Status && dao.TimerContentEqual(a, b)
}

// Rollback of a batch still running is refused and changes nothing.
func TestBatchRollbackOfARunningBatch(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setupBatches(t, s, batchOpts{unstarted: true}) // nothing runs: the batch stays pending
		ts := b.timers(t, "running", 2)
		v := b.createBatch(t, map[string]any{"operation": "enable", "target": map[string]any{"app": "running"}}, 202)
		if v.Status != dao.BatchPending || v.Total != 2 || v.Operation != "enable" || v.App != "running" || string(v.Target) != `{"app":"running"}` {
			t.Fatalf("created %+v", v)
		}
		b.do(t, http.MethodPost, batchPath(v.ID)+"/rollback", nil).wantError(t, 409, "batch_running", "")
		var got Batch
		b.do(t, http.MethodGet, batchPath(v.ID), nil).decode(t, &got)
		if got.Status != dao.BatchPending || got.Counts[dao.TaskPending] != 2 || got.RollbackStartedAt != nil {
			t.Fatalf("after a refused rollback: %+v", got)
		}
		for i, row := range b.rows(t, "running") {
			if row.Version != ts[i].Version {
				t.Fatalf("timer %d written", row.ID)
			}
		}
		// Cancel of a pending batch is fine; then everything is canceled.
		var c Batch
		r := b.do(t, http.MethodPost, batchPath(v.ID)+"/cancel", nil)
		r.wantStatus(t, 200)
		r.decode(t, &c)
		if c.Status != dao.BatchCancel || c.Counts[dao.TaskCancel] != 2 || c.FinishedAt == nil {
			t.Fatalf("canceled %+v", c)
		}
	})
}

// A disable batch changes each timer exactly as POST /timers/{id}/disable does, engine call
// included; tasks list with their images; the rollback restores them.
func TestBatchDisableAndRollback(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setupBatches(t, s)
		ts := b.timers(t, "life", 5) // 0, 2, 4 enabled
		orig := b.rows(t, "life")
		single := b.create(t, timerBody("life-single", "x"), http.StatusCreated)
		b.hook.take()
		b.do(t, http.MethodPost, timerPath(single.ID, "/disable"), nil).wantStatus(t, 200)
		want := b.hook.take()[0]

		v := b.createBatch(t, map[string]any{"operation": "disable", "target": map[string]any{"app": "life", "status": "enabled"}}, 202)
		if v.Total != 3 || v.Status != dao.BatchPending || v.DurationMS != nil {
			t.Fatalf("created %+v", v)
		}
		v = b.wait(t, v.ID, dao.BatchSuccess)
		if v.Counts[dao.TaskSuccess] != 3 || v.StartedAt == nil || v.DurationMS == nil {
			t.Fatalf("done %+v", v)
		}
		calls := b.hook.take()
		if len(calls) != 3 {
			t.Fatalf("engine told %d times", len(calls))
		}
		for _, c := range calls {
			// The same notification as the single-timer endpoint's: before enabled, after
			// disabled at the next version.
			if c.before == nil || c.before.Status != want.before.Status || c.after.Status != want.after.Status ||
				c.after.Version != c.before.Version+1 {
				t.Fatalf("batch hook call %+v, single-timer call %+v", c, want)
			}
		}
		for i, row := range b.rows(t, "life") {
			if row.Status != dao.StatusDisabled {
				t.Fatalf("timer %d is %s", row.ID, row.Status)
			}
			if i%2 == 1 && row.Version != ts[i].Version {
				t.Fatalf("a timer outside the selector was written: %+v", row)
			}
		}

		page := b.tasks(t, v.ID, "?limit=2")
		if len(page.Items) != 2 || page.NextCursor == "" {
			t.Fatalf("page 1: %+v", page)
		}
		rest := b.tasks(t, v.ID, "?limit=2&cursor="+page.NextCursor)
		if len(rest.Items) != 1 || rest.NextCursor != "" {
			t.Fatalf("page 2: %+v", rest)
		}
		task := page.Items[0]
		if task.Status != dao.TaskSuccess || task.TimerID != ts[0].ID || task.Before == nil || !task.Before.Enabled ||
			task.After == nil || task.After.Status != dao.StatusDisabled || task.After.Version != ts[0].Version+1 ||
			task.Instance == "" || task.Error != "" || task.FinishedAt == nil {
			t.Fatalf("task %+v", task)
		}
		if l := b.tasks(t, v.ID, "?status=fail"); len(l.Items) != 0 {
			t.Fatalf("failed tasks: %+v", l.Items)
		}

		var list List[Batch]
		b.do(t, http.MethodGet, "/api/v1/batches?app=life&status=success", nil).decode(t, &list)
		if len(list.Items) != 1 || list.Items[0].ID != v.ID || list.Items[0].Counts != nil {
			t.Fatalf("list %+v", list)
		}

		var rb Batch
		r := b.do(t, http.MethodPost, batchPath(v.ID)+"/rollback", nil)
		r.wantStatus(t, 202)
		r.decode(t, &rb)
		if rb.Status != dao.BatchRollbackRunning || rb.RollbackStartedAt == nil {
			t.Fatalf("rollback answer %+v", rb)
		}
		rb = b.wait(t, v.ID, dao.BatchRollbackSuccess)
		if rb.Counts[dao.TaskRollbackSuccess] != 3 || rb.RollbackDurationMS == nil {
			t.Fatalf("rolled back %+v", rb)
		}
		for i, row := range b.rows(t, "life") {
			if row.Status != orig[i].Status || !dao.TimerContentEqual(row, orig[i]) {
				t.Fatalf("timer %d not restored: %+v", row.ID, row)
			}
		}
		if calls := b.hook.take(); len(calls) != 3 || calls[0].after.Status != dao.StatusEnabled {
			t.Fatalf("rollback hook calls %+v", calls)
		}
	})
}

func TestBatchIdempotentCreate(t *testing.T) {
	t.Parallel()
	b := setupBatches(t, daotest.SQLite(t), batchOpts{unstarted: true})
	b.timers(t, "idem", 2)
	body := map[string]any{"operation": "disable", "target": map[string]any{"app": "idem"}, "request_id": "r-1"}
	first := b.createBatch(t, body, 202)
	again := b.createBatch(t, body, 200)
	if again.ID != first.ID || again.RequestID != "r-1" {
		t.Fatalf("replay %+v, first %+v", again, first)
	}
	body["operation"] = "enable"
	b.do(t, http.MethodPost, "/api/v1/batches", body).wantError(t, 409, "idempotency_conflict", "request_id")

	// A relative schedule is resolved at create, but the replay (later, formatted otherwise)
	// is still the same request.
	upd := `{"operation":"update","target":{"app":"idem"},"patch":{"schedule":{"in":"1h"}},"request_id":"r-2"}`
	first = b.createBatch(t, upd, 202)
	b.clock.Advance(time.Minute)
	again = b.createBatch(t, `{"request_id":"r-2", "patch":{"schedule":{"in":"1h"}}, "target":{"app":"idem"}, "operation":"update"}`, 200)
	if again.ID != first.ID || string(again.Patch) != string(first.Patch) {
		t.Fatalf("replay %+v, first %+v", again, first)
	}
}

// update applies a partial timer to every target the way PATCH does; delete deletes them
// the way DELETE does; both roll back.
func TestBatchUpdateAndDelete(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setupBatches(t, s)
		ts := b.timers(t, "upd", 4)
		ctx := context.Background()
		orig := map[int64]dao.Timer{}
		for _, row := range b.rows(t, "upd") {
			orig[row.ID] = row
		}

		v := b.createBatch(t, map[string]any{"operation": "update", "target": map[string]any{"app": "upd"},
			"patch": map[string]any{"callback": map[string]any{"url": "https://new.example/hook", "timeout": "2s"}, "retry": map[string]any{"max_attempts": 7}, "schedule": map[string]any{"in": "1h"}}}, 202)
		if !strings.Contains(string(v.Patch), `"at":"2026-11-21T10:00:00.000Z"`) {
			t.Fatalf("relative schedule not resolved once at create: %s", v.Patch)
		}
		b.wait(t, v.ID, dao.BatchSuccess)
		for _, row := range b.rows(t, "upd") {
			if row.Callback.URL != "https://new.example/hook" || row.Callback.TimeoutMS != 2000 || row.Retry.MaxAttempts != 7 ||
				row.Schedule.At != "2026-11-21T10:00:00.000Z" || row.Callback.Method != "POST" {
				t.Fatalf("timer not updated: %+v", row)
			}
		}
		b.do(t, http.MethodPost, batchPath(v.ID)+"/rollback", nil).wantStatus(t, 202)
		b.wait(t, v.ID, dao.BatchRollbackSuccess)
		for _, row := range b.rows(t, "upd") {
			if !dao.TimerContentEqual(row, orig[row.ID]) {
				t.Fatalf("update not rolled back:\n%+v\n%+v", row, orig[row.ID])
			}
		}

		d := b.createBatch(t, map[string]any{"operation": "delete", "target": map[string]any{"ids": []int64{ts[0].ID, ts[1].ID}}}, 202)
		b.wait(t, d.ID, dao.BatchSuccess)
		b.do(t, http.MethodGet, timerPath(ts[0].ID), nil).wantError(t, 404, "not_found", "")
		if rows := b.rows(t, "upd"); len(rows) != 2 {
			t.Fatalf("%d timers left", len(rows))
		}
		b.hook.take()
		b.do(t, http.MethodPost, batchPath(d.ID)+"/rollback", nil).wantStatus(t, 202)
		b.wait(t, d.ID, dao.BatchRollbackSuccess)
		for _, id := range []int64{ts[0].ID, ts[1].ID} {
			back, err := s.GetTimer(ctx, id)
			if err != nil || !dao.TimerContentEqual(back, orig[id]) {
				t.Fatalf("deleted timer %d not restored: %+v, %v", id, back, err)
			}
		}
		calls := b.hook.take()
		if len(calls) != 2 || calls[0].before.Status != dao.StatusDeleted {
			t.Fatalf("engine not told of the restore: %+v", calls)
		}
	})
}

// Enabling a completed one-shot fails as POST /enable does; the others succeed: partial_fail,
// the failing task with the endpoint's error.
func TestBatchPartialFailure(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setupBatches(t, s)
		b.timers(t, "pf", 2) // t1 disabled
		shot := timerBody("pf", "shot")
		shot["schedule"] = map[string]any{"in": "1m"}
		done := b.create(t, shot, http.StatusCreated)
		if err := s.CompleteOneShot(context.Background(), done.ID, done.Version, t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		v := b.createBatch(t, map[string]any{"operation": "enable", "target": map[string]any{"app": "pf"}}, 202)
		v = b.wait(t, v.ID, dao.BatchPartialFail)
		if v.Counts[dao.TaskSuccess] != 2 || v.Counts[dao.TaskFail] != 1 {
			t.Fatalf("counts %v", v.Counts)
		}
		failed := b.tasks(t, v.ID, "?status=fail").Items
		if len(failed) != 1 || failed[0].TimerID != done.ID || !strings.Contains(failed[0].Error, "timer_completed") || failed[0].Retries != 0 {
			t.Fatalf("failed tasks %+v", failed)
		}
	})
}

// trigger stores one manual execution per enabled timer, pending and due at once (the
// engine's retry poller runs it), keyed by the batch's creation time, and cannot be rolled
// back. The engine side is in test/batch_trigger_test.go.
func TestBatchTrigger(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setupBatches(t, s, batchOpts{unstarted: true})
		ts := b.timers(t, "trig", 5) // 0, 2, 4 enabled
		v := b.createBatch(t, map[string]any{"operation": "trigger", "target": map[string]any{"app": "trig"}}, 202)
		// Timer 2 fired already (a previous run of its task, say): not fired again.
		if _, ok, err := s.CreateManualExecution(context.Background(), dao.ManualParams{TimerID: ts[2].ID,
			ScheduledMS: t0.UnixMilli() + 5, NowMS: t0.UnixMilli()}); err != nil || !ok {
			t.Fatal(ok, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := b.batches.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer b.batches.Stop()
		v = b.wait(t, v.ID, dao.BatchPartialFail)
		if v.Counts[dao.TaskSuccess] != 3 || v.Counts[dao.TaskFail] != 2 {
			t.Fatalf("counts %v", v.Counts)
		}
		for i, tm := range ts {
			es, err := s.ListExecutions(ctx, dao.ListExecutionsParams{TimerID: tm.ID})
			if err != nil {
				t.Fatal(err)
			}
			switch i {
			case 0, 4:
				// Keyed at the first millisecond from the batch's creation that is not an
				// occurrence of the timer (every 30s from its creation, t0 included).
				row, err := s.GetTimer(ctx, tm.ID)
				if err != nil {
					t.Fatal(err)
				}
				sched, err := schedule.Parse(schedule.Spec(row.Schedule), time.UnixMilli(row.AnchorMS))
				if err != nil {
					t.Fatal(err)
				}
				if len(es) != 1 || !es[0].Manual || es[0].Status != dao.ExecPending || es[0].ScheduledMS < t0.UnixMilli() ||
					es[0].ScheduledMS > t0.UnixMilli()+1 || schedule.Has(sched, time.UnixMilli(es[0].ScheduledMS)) {
					t.Fatalf("timer %d: executions %+v, want one manual pending at the first non-occurrence from the batch's creation", i, es)
				}
				var ex ExecutionDetail
				b.do(t, http.MethodGet, fmt.Sprintf("/api/v1/executions/%d", es[0].ID), nil).decode(t, &ex)
				if !ex.Manual {
					t.Fatalf("execution view %+v: want manual", ex)
				}
			case 2:
				if len(es) != 1 || !es[0].Manual || es[0].ScheduledMS != t0.UnixMilli()+5 {
					t.Fatalf("timer 2 fired again: %+v", es)
				}
			default:
				if len(es) != 0 {
					t.Fatalf("disabled timer %d triggered: %+v", i, es)
				}
			}
		}
		b.do(t, http.MethodPost, batchPath(v.ID)+"/rollback", nil).wantError(t, 409, "not_reversible", "")
	})
}
