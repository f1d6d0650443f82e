package api

// Batch operations over many timers: the /api/v1/batches endpoints over package batch, and
// the timer operations registered on it. The operations run the single-timer endpoints' own
// code (changeTimer, removeTimer and the change functions of timers.go), so a batch changes
// a timer, validates a patch and tells the engine exactly as PATCH, enable, disable and
// DELETE do.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/tockd/tock/batch"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

// Limits of batch requests.
const (
	// MaxBatchBodyBytes caps a create body (it may list MaxBatchIDs ids).
	MaxBatchBodyBytes = 1 << 20
	// MaxBatchIDs caps an explicit id list; a selector may match up to batch.Config.MaxTargets.
	MaxBatchIDs = 10_000
	// BatchTaskTimeout is the timeout of one timer operation of a batch.
	BatchTaskTimeout = 10 * time.Second
)

// Batch operations.
const (
	OpEnable  = "enable"
	OpDisable = "disable"
	OpDelete  = "delete"
	OpUpdate  = "update"
	OpTrigger = "trigger"
)

// initBatches registers the timer operations on b.
func (a *API) initBatches(b *batch.Batch) {
	if b == nil {
		return
	}
	a.batches = b
	for _, h := range a.batchHandlers() {
		if err := b.Register(h); err != nil {
			panic(fmt.Sprintf("api: %v (one API per batch.Batch)", err))
		}
	}
}

func (a *API) batchRoutes(v1 *gin.RouterGroup) {
	if a.batches == nil {
		return
	}
	v1.POST("/batches", a.createBatch)
	v1.GET("/batches", a.listBatches)
	v1.GET("/batches/:id", a.getBatch)
	v1.GET("/batches/:id/tasks", a.listBatchTasks)
	v1.POST("/batches/:id/cancel", a.cancelBatch)
	v1.POST("/batches/:id/rollback", a.rollbackBatch)
}

// batchHandlers are the timer operations: each task runs the same change as the
// single-timer endpoint, journaled first, and rolls back by restoring the before-image.
func (a *API) batchHandlers() []batch.Handler {
	fixed := func(c changeFunc) func(json.RawMessage) (changeFunc, error) {
		return func(json.RawMessage) (changeFunc, error) { return c, nil }
	}
	hs := []batch.Handler{
		batch.Op{Name: OpEnable, MaxDuration: BatchTaskTimeout, Run: a.batchChange(fixed(enableChange)), Revert: a.batchRestore},
		batch.Op{Name: OpDisable, MaxDuration: BatchTaskTimeout, Run: a.batchChange(fixed(disableChange)), Revert: a.batchRestore},
		batch.Op{
			Name: OpUpdate, MaxDuration: BatchTaskTimeout, ValidateParams: validateBatchPatch,
			Run: a.batchChange(func(params json.RawMessage) (changeFunc, error) {
				p, err := decodePatch(params)
				return patchChange(p), err
			}),
			Revert: a.batchRestore,
		},
		batch.Op{Name: OpDelete, MaxDuration: BatchTaskTimeout, Run: a.batchDelete, Revert: a.batchRestore},
	}
	return append(hs, batch.Op{Name: OpTrigger, MaxDuration: BatchTaskTimeout, Run: a.batchTrigger})
}

// ourChange reports whether cur is the timer as an earlier attempt of the task journaled it
// would leave it: that attempt's write landed and only its outcome was lost.
func ourChange(t dao.BatchTask, cur dao.Timer) bool {
	return t.Before.Valid && t.After.Valid && t.After.Timer.Version != t.Before.Timer.Version &&
		cur.Version == t.After.Timer.Version && cur.Status == t.After.Timer.Status &&
		dao.TimerContentEqual(cur, t.After.Timer)
}

// batchChange runs a change of timers.go on the task's timer. A timer already in the wanted
// state is left alone (and the task records before = after, nothing to roll back); a timer
// the task changed in an earlier attempt is recognized by the journal and not changed again.
func (a *API) batchChange(mk func(params json.RawMessage) (changeFunc, error)) func(context.Context, *batch.Work) error {
	return func(ctx context.Context, w *batch.Work) error {
		var params json.RawMessage
		if w.Job.Params != "" {
			params = json.RawMessage(w.Job.Params)
		}
		change, err := mk(params)
		if err != nil {
			return batch.Permanent(err)
		}
		redone := false
		before, out, changed, err := a.changeTimer(ctx, w.Task.TimerID, func(cur dao.Timer, now time.Time) (dao.Timer, bool, error) {
			if ourChange(w.Task, cur) {
				redone = true
				return cur, false, nil
			}
			next, changed, err := change(cur, now)
			if err == nil && changed && dao.TimerContentEqual(cur, next) {
				changed = false // a patch to the values the timer has
			}
			return next, changed, err
		}, func(cur, next dao.Timer) error {
			return w.Journal(ctx, cur, next)
		})
		if err != nil {
			return batchTaskError(err)
		}
		switch {
		case redone:
			// The engine may not have heard of it before the earlier run died.
			a.notify(ctx, &w.Task.Before.Timer, out)
			w.SetImages(w.Task.Before.Timer, out)
		case changed:
			w.SetImages(before, out)
		default:
			w.SetImages(before, before)
		}
		return nil
	}
}

// batchDelete deletes the task's timer as DELETE does.
func (a *API) batchDelete(ctx context.Context, w *batch.Work) error {
	before, after, err := a.removeTimer(ctx, w.Task.TimerID, func(cur, next dao.Timer) error {
		return w.Journal(ctx, cur, next)
	})
	if errors.Is(err, dao.ErrNotFound) {
		// Gone already: by an earlier attempt of this task, or by someone else.
		cur, gerr := w.Store().GetTimerAny(ctx, w.Task.TimerID)
		if gerr != nil {
			return batchTaskError(fmt.Errorf("getting timer %d: %w", w.Task.TimerID, gerr))
		}
		if ourChange(w.Task, cur) {
			a.notify(ctx, &w.Task.Before.Timer, cur)
			w.SetImages(w.Task.Before.Timer, cur)
			return nil
		}
		w.SetImages(cur, cur)
		return nil
	}
	if err != nil {
		return batchTaskError(err)
	}
	w.SetImages(before, after)
	return nil
}

// batchRestore rolls a task back: it writes the before-image over the timer if the timer is
// still as the batch left it (same version), and tells the engine. A timer changed since is
// not overwritten: its task fails with the reason.
func (a *API) batchRestore(ctx context.Context, w *batch.Work) error {
	t := w.Task
	if !t.Before.Valid || !t.After.Valid || t.Before.Timer.Version == t.After.Timer.Version {
		return nil // the batch did not change this timer
	}
	before, after := t.Before.Timer, t.After.Timer
	cur, err := w.Store().GetTimerAny(ctx, t.TimerID)
	if err != nil {
		return batchTaskError(fmt.Errorf("getting timer %d: %w", t.TimerID, err))
	}
	if cur.Status == before.Status && dao.TimerContentEqual(cur, before) {
		if cur.Version == after.Version+1 {
			a.notify(ctx, &after, cur) // restored by an earlier attempt that died before telling
		}
		return nil
	}
	if cur.Version != after.Version {
		return batch.Permanent(fmt.Errorf("timer %d changed since the batch (version %d, the batch left version %d); not overwriting it",
			t.TimerID, cur.Version, after.Version))
	}
	out, err := w.Store().RestoreTimer(ctx, before, cur.Version, a.clock.Now().UnixMilli())
	if errors.Is(err, dao.ErrNameTaken) {
		return batch.Permanent(fmt.Errorf("timer %d: another timer of app %s is named %q now", t.TimerID, before.App, before.Name))
	}
	if err != nil {
		return batchTaskError(fmt.Errorf("restoring timer %d: %w", t.TimerID, err))
	}
	a.notify(ctx, &cur, out)
	return nil
}

// manualKeySpan bounds the search for a manual execution's key: the first millisecond from
// the batch's creation that is not an occurrence of the timer's schedule.
const manualKeySpan = 1000

// batchTrigger fires the task's timer once, now, outside its schedule: it stores a manual
// execution, pending and due at once, which the retry poller of any instance running the
// engine claims and runs like any execution (retries, takeover, the attempts list). Its key
// is the first millisecond from the batch's creation that is not an occurrence of the
// timer (so it neither swallows nor is swallowed by a scheduled one), and a task run again
// finds the execution its earlier run created: the timer fires once per batch.
func (a *API) batchTrigger(ctx context.Context, w *batch.Work) error {
	id := w.Task.TimerID
	cur, err := a.store.GetTimer(ctx, id)
	if err != nil {
		return batchTaskError(fmt.Errorf("getting timer %d: %w", id, err))
	}
	if cur.Status != dao.StatusEnabled {
		return batch.Permanent(fmt.Errorf("timer %d is %s; only an enabled timer can be triggered", id, cur.Status))
	}
	from := w.Job.CreatedMS
	earlier, err := a.store.ListExecutions(ctx, dao.ListExecutionsParams{TimerID: id, FromMS: from, ToMS: from + manualKeySpan})
	if err != nil {
		return batchTaskError(fmt.Errorf("finding earlier runs for timer %d: %w", id, err))
	}
	for _, e := range earlier {
		if e.Manual {
			return nil // an earlier run of this task fired it
		}
	}
	sched, err := schedule.Parse(schedule.Spec(cur.Schedule), time.UnixMilli(cur.AnchorMS))
	if err != nil {
		return batch.Permanent(fmt.Errorf("timer %d: stored schedule: %w", id, err))
	}
	at := from
	for schedule.Has(sched, time.UnixMilli(at)) && at < from+manualKeySpan {
		at++
	}
	if at == from+manualKeySpan {
		return batch.Permanent(fmt.Errorf("timer %d: no free millisecond for a manual execution", id))
	}
	exec, created, err := a.store.CreateManualExecution(ctx, dao.ManualParams{TimerID: id, ScheduledMS: at, NowMS: a.clock.Now().UnixMilli()})
	if err != nil {
		return batchTaskError(fmt.Errorf("firing timer %d: %w", id, err))
	}
	switch {
	case exec.ID == 0:
		// Disabled or deleted between the read and the insert.
		return batch.Permanent(fmt.Errorf("timer %d is no longer enabled; not triggered", id))
	case !created && !exec.Manual:
		return fmt.Errorf("timer %d: occurrence %s was taken meanwhile; trying again", id, dao.Key(id, at))
	}
	return nil
}

// batchTaskError sorts a task's error: what the single-timer endpoint would answer with a 4xx
// cannot be fixed by retrying; a version conflict or a store error may be.
func batchTaskError(err error) error {
	if errors.Is(err, batch.ErrTaskLost) || errors.Is(err, dao.ErrVersionConflict) {
		return err
	}
	if asAPIError(err).status() < 500 {
		return batch.Permanent(err)
	}
	return err
}

// validateBatchPatch checks the patch of an update batch when it is created: the same strict
// decoding and the same value checks as PATCH /timers/{id}, applied to a probe timer (checks
// that depend on each timer's own values run per task). A relative "in" schedule is resolved
// now, so every timer gets the same "at".
func validateBatchPatch(params json.RawMessage, now time.Time) (json.RawMessage, error) {
	if params == nil {
		return nil, newError(codeMissingField, "patch", "the update operation needs a patch: the fields to change, as in PATCH /api/v1/timers/{id}")
	}
	p, err := decodePatch(params)
	if err != nil {
		return nil, fieldUnder("patch", err)
	}
	switch {
	case p.Name != nil:
		return nil, newError(codeInvalidValue, "patch.name", "a batch cannot give its timers one name")
	case p.empty():
		return nil, newError(codeInvalidValue, "patch", "the patch changes nothing")
	}
	probe := dao.Timer{Status: dao.StatusEnabled, Callback: defaultCallback(), Retry: dao.RetryPolicy{
		MaxAttempts: DefaultMaxAttempts, BackoffMS: 1, MaxBackoffMS: MaxMaxBackoff.Milliseconds(),
	}}
	probe.Callback.URL = "http://probe.invalid/"
	next, err := applyPatch(probe, p, now)
	if err != nil {
		return nil, fieldUnder("patch", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return nil, newError(codeInvalidJSON, "patch", "the patch must be a JSON object")
	}
	if p.Schedule != nil {
		m["schedule"], _ = json.Marshal(next.Schedule) // JSONSpec of strings: cannot fail
	}
	out, _ := json.Marshal(m) // sorted keys, compact
	return out, nil
}

// fieldUnder puts a validation error's field under parent ("callback.url" -> "patch.callback.url").
func fieldUnder(parent string, err error) error {
	ae := *asAPIError(err)
	if ae.Field == "" {
		ae.Field = parent
	} else {
		ae.Field = parent + "." + ae.Field
	}
	return &ae
}

// batchError turns the batch service's errors into API errors.
func batchError(err error) error {
	msg := err.Error()
	for _, m := range []struct {
		sentinel    error
		code, field string
	}{
		{batch.ErrUnknownOperation, codeUnknownOperation, "operation"},
		{batch.ErrInvalidParams, codeInvalidValue, "patch"},
		{batch.ErrEmptyTarget, codeEmptyTarget, "target"},
		{batch.ErrNoMatch, codeNoMatch, "target"},
		{batch.ErrUnknownTimers, codeUnknownTimers, "target.ids"},
		{batch.ErrTooManyTargets, codeTooManyTargets, "target"},
		{batch.ErrIdempotency, codeIdempotency, "request_id"},
		{batch.ErrRunning, codeBatchRunning, ""},
		{batch.ErrFinished, codeBatchFinished, ""},
		{batch.ErrRolledBack, codeBatchRolledBack, ""},
		{batch.ErrNotReversible, codeNotReversible, ""},
	} {
		if errors.Is(err, m.sentinel) {
			return &apiError{Code: m.code, Field: m.field, Message: msg}
		}
	}
	return err
}

// batchCreateRequest is the decoded body of POST /batches; nil means "not given".
type batchCreateRequest struct {
	Operation *string
	Target    *object
	IDs       []int64
	IDsGiven  bool
	Patch     json.RawMessage
	RequestID *string
}

func decodeBatchCreate(body []byte) (batchCreateRequest, error) {
	var r batchCreateRequest
	o, err := parseBody(body)
	if err != nil {
		return r, err
	}
	if err := o.only("operation", "target", "patch", "request_id"); err != nil {
		return r, err
	}
	if r.Operation, err = o.str("operation"); err != nil {
		return r, err
	}
	if r.Target, err = o.obj("target"); err != nil {
		return r, err
	}
	if r.Target != nil {
		if err := r.Target.only("ids", "app", "status", "name_prefix"); err != nil {
			return r, err
		}
		if v, ok := r.Target.raw("ids"); ok {
			if err := json.Unmarshal(v, &r.IDs); err != nil {
				return r, newError(codeInvalidField, "target.ids", "must be an array of timer ids (integers)")
			}
			r.IDsGiven = true
		}
	}
	if v, ok := o.raw("patch"); ok {
		if !bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
			return r, newError(codeInvalidField, "patch", "must be an object")
		}
		r.Patch = v
	}
	if r.RequestID, err = o.str("request_id"); err != nil {
		return r, err
	}
	return r, nil
}

// batchParams validates a decoded create request.
func batchParams(r batchCreateRequest) (batch.CreateParams, error) {
	var p batch.CreateParams
	switch {
	case r.Operation == nil || *r.Operation == "":
		return p, newError(codeMissingField, "operation", "operation is required: one of enable, disable, delete, update, trigger")
	case r.Target == nil:
		return p, newError(codeMissingField, "target", `target is required: {"ids": [...]} or a selector {"app": ..., "status": ..., "name_prefix": ...}`)
	}
	p.Operation, p.Params = *r.Operation, r.Patch
	app, err := r.Target.str("app")
	if err != nil {
		return p, err
	}
	status, err := r.Target.str("status")
	if err != nil {
		return p, err
	}
	prefix, err := r.Target.str("name_prefix")
	if err != nil {
		return p, err
	}
	selector := app != nil || status != nil || prefix != nil
	switch {
	case r.IDsGiven && selector:
		return p, newError(codeInvalidValue, "target", "give either ids or a selector (app, status, name_prefix), not both")
	case r.IDsGiven:
		if len(r.IDs) == 0 {
			return p, newError(codeEmptyTarget, "target.ids", "the list of timer ids is empty")
		}
		if len(r.IDs) > MaxBatchIDs {
			return p, newError(codeTooManyTargets, "target.ids", "at most %d ids per request; use a selector for more", MaxBatchIDs)
		}
		for _, id := range r.IDs {
			if id < 1 {
				return p, newError(codeInvalidValue, "target.ids", "%d is not a timer id", id)
			}
		}
		p.IDs = r.IDs
	case !selector:
		return p, newError(codeEmptyTarget, "target", `the target is empty: give {"ids": [...]} or a selector with an app`)
	default:
		sel := dao.TimerSelector{}
		if app == nil {
			return p, newError(codeMissingField, "target.app", "a selector needs an app")
		}
		if !appPattern.MatchString(*app) {
			return p, newError(codeInvalidValue, "target.app", "must be 1 to 64 characters of a-z, 0-9, _ and -")
		}
		sel.App = *app
		if status != nil {
			switch *status {
			case dao.StatusEnabled, dao.StatusDisabled, dao.StatusCompleted:
				sel.Status = *status
			default:
				return p, newError(codeInvalidValue, "target.status", "must be enabled, disabled or completed")
			}
		}
		if prefix != nil {
			if *prefix == "" || utf8.RuneCountInString(*prefix) > MaxNameLen || strings.ContainsFunc(*prefix, unicode.IsControl) {
				return p, newError(codeInvalidValue, "target.name_prefix", "must be 1 to %d characters without control characters", MaxNameLen)
			}
			sel.NamePrefix = *prefix
		}
		p.Selector = &sel
	}
	if r.RequestID != nil && *r.RequestID != "" {
		if err := validateText("request_id", *r.RequestID, MaxRequestIDLen); err != nil {
			return p, err
		}
		p.RequestID = *r.RequestID
	}
	return p, nil
}

// POST /api/v1/batches
func (a *API) createBatch(c *gin.Context) {
	body, err := readBodyMax(c, MaxBatchBodyBytes)
	if err != nil {
		a.fail(c, err)
		return
	}
	r, err := decodeBatchCreate(body)
	if err != nil {
		a.fail(c, err)
		return
	}
	p, err := batchParams(r)
	if err != nil {
		a.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	j, existed, err := a.batches.Create(ctx, p)
	if err != nil {
		a.fail(c, batchError(err))
		return
	}
	status := http.StatusAccepted
	if existed {
		status = http.StatusOK // a retry of a create that succeeded
	}
	writeJSON(c, status, batchView(j, nil))
}

// GET /api/v1/batches/:id
func (a *API) getBatch(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	j, counts, err := a.batches.Get(c.Request.Context(), id)
	if err != nil {
		a.fail(c, fmt.Errorf("getting batch %d: %w", id, err))
		return
	}
	writeJSON(c, http.StatusOK, batchView(j, counts))
}

// GET /api/v1/batches?app=&status=&limit=&cursor=
func (a *API) listBatches(c *gin.Context) {
	lq, ok := a.readListQuery(c, dao.BatchStatuses)
	if !ok {
		return
	}
	app, ok := a.readApp(c, lq.values)
	if !ok {
		return
	}
	pg, status := lq.page, lq.status
	js, err := a.batches.List(c.Request.Context(), dao.ListBatchesParams{App: app, Status: status, AfterID: pg.afterID, Limit: pg.limit + 1})
	if err != nil {
		a.fail(c, fmt.Errorf("listing batches: %w", err))
		return
	}
	writeJSON(c, http.StatusOK, listPage(js, pg.limit, func(j dao.BatchJob) int64 { return j.ID },
		func(j dao.BatchJob) Batch { return batchView(j, nil) }))
}

// GET /api/v1/batches/:id/tasks?status=&limit=&cursor=
func (a *API) listBatchTasks(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	lq, ok := a.readListQuery(c, dao.TaskStatuses)
	if !ok {
		return
	}
	pg, status := lq.page, lq.status
	ts, err := a.batches.ListTasks(c.Request.Context(), dao.ListBatchTasksParams{BatchID: id, Status: status, AfterID: pg.afterID, Limit: pg.limit + 1})
	if err != nil {
		a.fail(c, fmt.Errorf("listing tasks of batch %d: %w", id, err))
		return
	}
	writeJSON(c, http.StatusOK, listPage(ts, pg.limit, func(t dao.BatchTask) int64 { return t.ID }, batchTaskView))
}

// POST /api/v1/batches/:id/cancel
func (a *API) cancelBatch(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	j, counts, err := a.batches.Cancel(c.Request.Context(), id)
	if err != nil {
		a.fail(c, batchError(fmt.Errorf("canceling batch %d: %w", id, err)))
		return
	}
	writeJSON(c, http.StatusOK, batchView(j, counts))
}

// POST /api/v1/batches/:id/rollback
func (a *API) rollbackBatch(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	j, counts, err := a.batches.Rollback(c.Request.Context(), id)
	if err != nil {
		a.fail(c, batchError(fmt.Errorf("rolling back batch %d: %w", id, err)))
		return
	}
	writeJSON(c, http.StatusAccepted, batchView(j, counts))
}

// Batch is the JSON form of a batch. Unset times are null; DurationMS is from creation to
// the end of the forward run, RollbackDurationMS from the rollback request to its end.
type Batch struct {
	ID                 int64           `json:"id"`
	App                string          `json:"app"`
	Operation          string          `json:"operation"`
	Status             string          `json:"status"`
	Target             json.RawMessage `json:"target"`
	Patch              json.RawMessage `json:"patch,omitempty"`
	RequestID          string          `json:"request_id,omitempty"`
	Total              int             `json:"total"`
	Counts             map[string]int  `json:"counts,omitempty"`
	CreatedAt          string          `json:"created_at"`
	UpdatedAt          string          `json:"updated_at"`
	StartedAt          *string         `json:"started_at"`
	FinishedAt         *string         `json:"finished_at"`
	DurationMS         *int64          `json:"duration_ms"`
	RollbackStartedAt  *string         `json:"rollback_started_at"`
	RollbackFinishedAt *string         `json:"rollback_finished_at"`
	RollbackDurationMS *int64          `json:"rollback_duration_ms"`
}

// BatchTask is the JSON form of one task: its timer, status, retries, last error, the
// instance that ran it last, and the timer before and after the change once recorded.
type BatchTask struct {
	ID         int64   `json:"id"`
	BatchID    int64   `json:"batch_id"`
	TimerID    int64   `json:"timer_id"`
	Status     string  `json:"status"`
	Retries    int     `json:"retries"`
	Error      string  `json:"error"`
	Instance   string  `json:"instance"`
	StartedAt  *string `json:"started_at"`
	FinishedAt *string `json:"finished_at"`
	Before     *Timer  `json:"before"`
	After      *Timer  `json:"after"`
}

func batchView(j dao.BatchJob, counts batch.Counts) Batch {
	v := Batch{
		ID: j.ID, App: j.App, Operation: j.Operation, Status: j.Status, Target: json.RawMessage(j.Target),
		RequestID: j.RequestID, Total: j.Total, Counts: counts,
		CreatedAt: msTime(j.CreatedMS), UpdatedAt: msTime(j.UpdatedMS),
		StartedAt: optTime(j.StartedMS), FinishedAt: optTime(j.FinishedMS),
		RollbackStartedAt: optTime(j.RollbackStartedMS), RollbackFinishedAt: optTime(j.RollbackFinishedMS),
	}
	if j.Params != "" {
		v.Patch = json.RawMessage(j.Params)
	}
	if j.FinishedMS > 0 {
		d := j.FinishedMS - j.CreatedMS
		v.DurationMS = &d
	}
	if j.RollbackFinishedMS > 0 {
		d := j.RollbackFinishedMS - j.RollbackStartedMS
		v.RollbackDurationMS = &d
	}
	return v
}

func batchTaskView(t dao.BatchTask) BatchTask {
	image := func(i dao.TimerImage) *Timer {
		if !i.Valid {
			return nil
		}
		v := timerView(i.Timer, time.Time{})
		v.NextFireAt = nil // an image does not fire
		return &v
	}
	return BatchTask{
		ID: t.ID, BatchID: t.BatchID, TimerID: t.TimerID, Status: t.Status, Retries: t.Retry, Error: t.Error,
		Instance: t.Owner, StartedAt: optTime(t.StartedMS), FinishedAt: optTime(t.FinishedMS),
		Before: image(t.Before), After: image(t.After),
	}
}
