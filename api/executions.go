package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tockd/tock/dao"
)

// pathID reads the :id of the path. An id that is not a positive integer in canonical form
// names no resource, so it is a 404 like an id that does not exist.
func (a *API) pathID(c *gin.Context) (int64, bool) {
	s := c.Param("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 || strconv.FormatInt(id, 10) != s {
		a.fail(c, newError(codeNotFound, "", "%q is not an id", s))
		return 0, false
	}
	return id, true
}

// GET /api/v1/timers/:id/executions?status=&from=&to=&limit=&cursor=
func (a *API) listExecutions(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	lq, ok := a.readListQuery(c, []string{dao.ExecPending, dao.ExecRunning, dao.ExecSucceeded, dao.ExecFailed, dao.ExecMissed})
	if !ok {
		return
	}
	q, pg, status := lq.values, lq.page, lq.status
	fromMS, fromSet, err := queryTime(q, "from")
	if err != nil {
		a.fail(c, err)
		return
	}
	toMS, toSet, err := queryTime(q, "to")
	if err != nil {
		a.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	// A deleted timer's executions are gone with it.
	if _, err := a.store.GetTimer(ctx, id); err != nil {
		a.fail(c, fmt.Errorf("getting timer %d: %w", id, err))
		return
	}
	if toSet && toMS <= 0 {
		// Nothing is scheduled before 1970; the store reads ToMS <= 0 as "no bound".
		writeJSON(c, http.StatusOK, List[Execution]{Items: []Execution{}})
		return
	}
	if !fromSet || fromMS < 0 {
		fromMS = 0
	}
	if !toSet {
		toMS = 0
	}
	execs, err := a.store.ListExecutions(ctx, dao.ListExecutionsParams{
		TimerID: id, Status: status, FromMS: fromMS, ToMS: toMS, AfterID: pg.afterID, Limit: pg.limit + 1,
	})
	if err != nil {
		a.fail(c, fmt.Errorf("listing executions of timer %d: %w", id, err))
		return
	}
	writeJSON(c, http.StatusOK, listPage(execs, pg.limit, func(e dao.Execution) int64 { return e.ID }, executionView))
}

// queryTime reads an RFC 3339 query parameter as unix milliseconds, rounded up: the bounds
// are "scheduled_ms >= from" and "scheduled_ms < to", and occurrences are whole milliseconds.
func queryTime(q url.Values, name string) (int64, bool, error) {
	s := q.Get(name)
	if s == "" {
		return 0, false, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, false, newError(codeInvalidTime, name, "%s must be an RFC 3339 time like 2026-11-21T09:00:00Z", name)
	}
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms, true, nil
}

// GET /api/v1/executions/:id
func (a *API) getExecution(c *gin.Context) {
	id, ok := a.pathID(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	e, err := a.store.GetExecution(ctx, id)
	if err != nil {
		a.fail(c, fmt.Errorf("getting execution %d: %w", id, err))
		return
	}
	if _, err := a.store.GetTimer(ctx, e.TimerID); err != nil {
		a.fail(c, fmt.Errorf("getting timer %d of execution %d: %w", e.TimerID, id, err))
		return
	}
	detail := ExecutionDetail{Execution: executionView(e), Attempts: []Attempt{}}
	// Stores without attempts (test fakes) answer with an empty list.
	if as, ok := a.store.(attemptLister); ok {
		list, err := as.ListAttempts(ctx, id)
		if err != nil {
			a.fail(c, fmt.Errorf("listing attempts of execution %d: %w", id, err))
			return
		}
		for _, at := range list {
			detail.Attempts = append(detail.Attempts, attemptView(at))
		}
	}
	writeJSON(c, http.StatusOK, detail)
}

// attemptLister is the store's ListAttempts (dao.Store has it).
type attemptLister interface {
	ListAttempts(ctx context.Context, taskID int64) ([]dao.Attempt, error)
}

var _ attemptLister = (*dao.Store)(nil)
