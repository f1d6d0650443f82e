package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tockd/tock/dao"
)

// maxUpdateAttempts bounds the read-modify-write retries of a change that loses an optimistic
// locking race (with another request or the engine completing a one-shot).
const maxUpdateAttempts = 5

// hookTimeout bounds the engine hook; the index is a cache and may lag.
const hookTimeout = 5 * time.Second

// POST /api/v1/timers
func (a *API) createTimer(c *gin.Context) {
	body, err := readBody(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	req, err := decodeCreate(body)
	if err != nil {
		a.fail(c, err)
		return
	}
	now := a.clock.Now()
	t, err := newTimer(req, now)
	if err != nil {
		a.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	out, existed, err := a.store.CreateTimer(ctx, t, now.UnixMilli())
	if err != nil {
		a.fail(c, fmt.Errorf("creating timer: %w", err))
		return
	}
	if existed {
		// A retry of a create that succeeded: answer the original timer, unless the key
		// now comes with another request or names a timer deleted since (a 2xx would then
		// claim a timer that no longer runs).
		if out.Status == dao.StatusDeleted {
			a.fail(c, newError(codeIdempotency, "request_id", "request_id %q belongs to timer %d, which was deleted; use a new request_id", t.RequestID, out.ID))
			return
		}
		if out.RequestHash != t.RequestHash {
			a.fail(c, newError(codeIdempotency, "request_id", "request_id %q was used with a different request body (timer %d)", t.RequestID, out.ID))
			return
		}
		writeJSON(c, http.StatusOK, timerView(out, now))
		return
	}
	a.notify(ctx, nil, out)
	writeJSON(c, http.StatusCreated, timerView(out, now))
}

// GET /api/v1/timers/:id
func (a *API) getTimer(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	t, err := a.store.GetTimer(c.Request.Context(), id)
	if err != nil {
		a.fail(c, fmt.Errorf("getting timer %d: %w", id, err))
		return
	}
	writeJSON(c, http.StatusOK, timerView(t, a.clock.Now()))
}

// GET /api/v1/timers?app=&status=&limit=&cursor=
func (a *API) listTimers(c *gin.Context) {
	lq, ok := a.readListQuery(c, []string{dao.StatusEnabled, dao.StatusDisabled, dao.StatusCompleted})
	if !ok {
		return
	}
	app, ok := a.readApp(c, lq.values)
	if !ok {
		return
	}
	pg, status := lq.page, lq.status
	timers, err := a.store.ListTimers(c.Request.Context(), dao.ListTimersParams{
		App: app, Status: status, AfterID: pg.afterID, Limit: pg.limit + 1,
	})
	if err != nil {
		a.fail(c, fmt.Errorf("listing timers: %w", err))
		return
	}
	now := a.clock.Now()
	writeJSON(c, http.StatusOK, listPage(timers, pg.limit, func(t dao.Timer) int64 { return t.ID },
		func(t dao.Timer) Timer { return timerView(t, now) }))
}

// PATCH /api/v1/timers/:id
func (a *API) patchTimer(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	body, err := readBody(c)
	if err != nil {
		a.fail(c, err)
		return
	}
	p, err := decodePatch(body)
	if err != nil {
		a.fail(c, err)
		return
	}
	a.update(c, id, patchChange(p))
}

// POST /api/v1/timers/:id/enable
func (a *API) enableTimer(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	a.update(c, id, enableChange)
}

// POST /api/v1/timers/:id/disable
func (a *API) disableTimer(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	a.update(c, id, disableChange)
}

// changeFunc computes a timer's new state from its current one at now: the new timer and
// whether it differs (no write, no version bump otherwise).
type changeFunc func(cur dao.Timer, now time.Time) (dao.Timer, bool, error)

// enableChange enables a disabled timer; a completed one-shot cannot be enabled.
func enableChange(cur dao.Timer, _ time.Time) (dao.Timer, bool, error) {
	switch cur.Status {
	case dao.StatusDisabled:
		cur.Status = dao.StatusEnabled
		return cur, true, nil
	case dao.StatusCompleted:
		return cur, false, newError(codeTimerCompleted, "", "timer %d has completed; PATCH a new schedule to run it again", cur.ID)
	}
	return cur, false, nil
}

// disableChange disables an enabled timer. Disabling a completed timer is a no-op: it does
// not fire, and turning it into "disabled" would let a later enable fire its past one-shot
// again.
func disableChange(cur dao.Timer, _ time.Time) (dao.Timer, bool, error) {
	if cur.Status == dao.StatusEnabled {
		cur.Status = dao.StatusDisabled
		return cur, true, nil
	}
	return cur, false, nil
}

// patchChange applies a validated PATCH body.
func patchChange(p patchRequest) changeFunc {
	return func(cur dao.Timer, now time.Time) (dao.Timer, bool, error) {
		if p.empty() {
			return cur, false, nil
		}
		next, err := applyPatch(cur, p, now)
		return next, true, err
	}
}

// update answers the read-modify-write of changeTimer.
func (a *API) update(c *gin.Context, id int64, change changeFunc) {
	_, out, _, err := a.changeTimer(c.Request.Context(), id, change, nil)
	if err != nil {
		a.fail(c, err)
		return
	}
	writeJSON(c, http.StatusOK, timerView(out, a.clock.Now()))
}

// changeTimer is the read-modify-write of a timer under optimistic locking, shared by the
// single-timer endpoints and the batch handlers: a version conflict re-reads and re-applies
// change. beforeWrite, when set, runs between the computation and the write with the current
// timer and the new one as it will be written (version and update time included; a batch
// journals them); its error aborts the change. After a committed
// change the engine is told. out is the timer as it is now (cur when nothing changed).
func (a *API) changeTimer(ctx context.Context, id int64, change changeFunc, beforeWrite func(cur, next dao.Timer) error) (before, out dao.Timer, changed bool, err error) {
	for attempt := 1; ; attempt++ {
		cur, err := a.store.GetTimer(ctx, id)
		if err != nil {
			return dao.Timer{}, dao.Timer{}, false, fmt.Errorf("getting timer %d: %w", id, err)
		}
		now := a.clock.Now()
		next, changed, err := change(cur, now)
		if err != nil {
			return cur, cur, false, err
		}
		if !changed {
			return cur, cur, false, nil
		}
		if beforeWrite != nil {
			// As UpdateTimer will write it.
			next.Version, next.UpdatedMS = cur.Version+1, now.UnixMilli()
			if err := beforeWrite(cur, next); err != nil {
				return cur, cur, false, err
			}
		}
		out, err := a.store.UpdateTimer(ctx, next, cur.Version, now.UnixMilli())
		if errors.Is(err, dao.ErrVersionConflict) && attempt < maxUpdateAttempts {
			continue
		}
		if err != nil {
			return cur, cur, false, fmt.Errorf("updating timer %d: %w", id, err)
		}
		a.notify(ctx, &cur, out)
		return cur, out, true, nil
	}
}

// DELETE /api/v1/timers/:id
func (a *API) deleteTimer(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	if _, _, err := a.removeTimer(c.Request.Context(), id, nil); err != nil {
		a.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// removeTimer soft-deletes a timer and tells the engine, shared by DELETE and the batch
// handler; beforeWrite is as in changeTimer. It returns the timer before and after.
func (a *API) removeTimer(ctx context.Context, id int64, beforeWrite func(cur, next dao.Timer) error) (before, after dao.Timer, err error) {
	cur, err := a.store.GetTimer(ctx, id)
	if err != nil {
		return dao.Timer{}, dao.Timer{}, fmt.Errorf("getting timer %d: %w", id, err)
	}
	nowMS := a.clock.Now().UnixMilli()
	after = cur
	after.Status = dao.StatusDeleted
	after.Version = cur.Version + 1
	after.UpdatedMS = nowMS
	if beforeWrite != nil {
		if err := beforeWrite(cur, after); err != nil {
			return cur, cur, err
		}
	}
	if err := a.store.DeleteTimer(ctx, id, nowMS); err != nil {
		return cur, cur, fmt.Errorf("deleting timer %d: %w", id, err)
	}
	a.notify(ctx, &cur, after)
	return cur, after, nil
}

// notify tells the engine about a change. Its failure does not fail the request: the store
// has the change and the migrator re-stamps from it.
func (a *API) notify(ctx context.Context, before *dao.Timer, after dao.Timer) {
	if a.engine == nil {
		return
	}
	// The change is committed: finish telling the engine even if the client hangs up.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hookTimeout)
	defer cancel()
	if err := a.engine.TimerChanged(hctx, before, after); err != nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "api: engine hook failed; the migrator will catch up",
			slog.Int64("timer_id", after.ID),
			slog.String("status", after.Status),
			slog.Any("error", err),
		)
	}
}
