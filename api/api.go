package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/batch"
	"github.com/tockd/tock/dao"
)

// Store is the part of *dao.Store the API uses.
type Store interface {
	CreateTimer(ctx context.Context, t dao.Timer, nowMS int64) (dao.Timer, bool, error)
	GetTimer(ctx context.Context, id int64) (dao.Timer, error)
	ListTimers(ctx context.Context, p dao.ListTimersParams) ([]dao.Timer, error)
	UpdateTimer(ctx context.Context, t dao.Timer, expectVersion, nowMS int64) (dao.Timer, error)
	DeleteTimer(ctx context.Context, id, nowMS int64) error
	GetExecution(ctx context.Context, id int64) (dao.Execution, error)
	ListExecutions(ctx context.Context, p dao.ListExecutionsParams) ([]dao.Execution, error)
	CreateManualExecution(ctx context.Context, p dao.ManualParams) (dao.Execution, bool, error)
}

var _ Store = (*dao.Store)(nil)

// EngineHook is told about every change of a timer so the engine can stamp (or unstamp) its
// upcoming occurrences in the index at once. before is nil for a new timer; a deleted timer
// comes with after.Status "deleted". An error is logged and does not fail the request: the
// store is the truth and the migrator re-stamps from it.
type EngineHook interface {
	TimerChanged(ctx context.Context, before *dao.Timer, after dao.Timer) error
}

// Check is one readiness probe of /readyz, e.g. a store's ping.
type Check struct {
	Name string
	Fn   func(ctx context.Context) error
}

// Deps are what the API needs. Store and Clock are required.
type Deps struct {
	Store   Store
	Clock   clockwork.Clock
	Engine  EngineHook // optional
	Checks  []Check
	Log     *slog.Logger // default slog.Default()
	Version string
	// Batches serves /api/v1/batches when set; New registers the timer operations on it
	// (batches.go).
	Batches *batch.Batch
	// Compensation serves /api/v1/admin/compensation when set (admin.go).
	Compensation Compensation
}

// API serves the REST API.
type API struct {
	store   Store
	clock   clockwork.Clock
	engine  EngineHook
	checks  []Check
	log     *slog.Logger
	version string
	batches *batch.Batch
	comp    Compensation
	handler http.Handler
}

var releaseMode sync.Once

// New builds the API and its routes.
func New(d Deps) *API {
	if d.Store == nil || d.Clock == nil {
		panic("api: Deps.Store and Deps.Clock are required")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	a := &API{
		store:   d.Store,
		clock:   d.Clock,
		engine:  d.Engine,
		checks:  d.Checks,
		log:     d.Log,
		version: d.Version,
		comp:    d.Compensation,
	}
	a.initBatches(d.Batches)
	// gin's mode is process-wide; release mode silences its debug printing.
	releaseMode.Do(func() { gin.SetMode(gin.ReleaseMode) })
	a.handler = a.routes()
	return a
}

// Handler returns the http.Handler serving /api/v1, /healthz and /readyz.
func (a *API) Handler() http.Handler { return a.handler }

func (a *API) routes() *gin.Engine {
	r := gin.New()
	// Precise 404/405 answers instead of redirects; the paths are exact.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	r.Use(a.logRequests, a.recoverPanics)
	r.NoRoute(func(c *gin.Context) {
		a.fail(c, newError(codeNotFound, "", "no route %s %s", c.Request.Method, c.Request.URL.Path))
	})
	r.NoMethod(func(c *gin.Context) {
		a.fail(c, newError(codeMethodNotAllowed, "", "%s is not allowed here; allowed: %s", c.Request.Method, c.Writer.Header().Get("Allow")))
	})

	// HEAD too: some load balancers probe with it.
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		r.Handle(m, "/healthz", a.healthz)
		r.Handle(m, "/readyz", a.readyz)
	}

	v1 := r.Group("/api/v1")
	v1.POST("/timers", a.createTimer)
	v1.GET("/timers", a.listTimers)
	v1.GET("/timers/:id", a.getTimer)
	v1.PATCH("/timers/:id", a.patchTimer)
	v1.DELETE("/timers/:id", a.deleteTimer)
	v1.POST("/timers/:id/enable", a.enableTimer)
	v1.POST("/timers/:id/disable", a.disableTimer)
	v1.GET("/timers/:id/executions", a.listExecutions)
	v1.GET("/executions/:id", a.getExecution)
	a.batchRoutes(v1)
	a.adminRoutes(v1)
	return r
}

func (a *API) logRequests(c *gin.Context) {
	start := a.clock.Now()
	c.Next()
	a.log.LogAttrs(c.Request.Context(), slog.LevelDebug, "http request",
		slog.String("method", c.Request.Method),
		slog.String("path", c.Request.URL.Path),
		slog.Int("status", c.Writer.Status()),
		slog.Int64("duration_ms", a.clock.Since(start).Milliseconds()),
	)
}

// recoverPanics turns a panic into a logged 500; no input is known to cause one.
func (a *API) recoverPanics(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			a.log.Error("api: panic serving request",
				slog.String("method", c.Request.Method),
				slog.String("path", c.Request.URL.Path),
				slog.Any("panic", v),
				slog.String("stack", string(debug.Stack())),
			)
			if !c.Writer.Written() {
				a.fail(c, &apiError{Code: codeInternal, Message: "internal error", Err: fmt.Errorf("panic: %v", v)})
			}
			c.Abort()
		}
	}()
	c.Next()
}

// writeJSON answers v with status.
func writeJSON(c *gin.Context, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// The API's own types always marshal; this would be a bug.
		panic(fmt.Sprintf("api: marshal %T: %v", v, err))
	}
	c.Data(status, "application/json; charset=utf-8", b)
}

// fail answers err in the error shape; 5xx causes are logged.
func (a *API) fail(c *gin.Context, err error) {
	ae := asAPIError(err)
	status := ae.status()
	if status >= 500 && ae.Code != codeInternal && ae.Code != codeNotReady {
		level := slog.LevelError
		if errors.Is(ae.Err, context.Canceled) {
			level = slog.LevelDebug // the client went away
		}
		a.log.LogAttrs(c.Request.Context(), level, "api: request failed",
			slog.String("method", c.Request.Method),
			slog.String("path", c.Request.URL.Path),
			slog.String("code", ae.Code),
			slog.Any("error", ae.Err),
		)
	}
	writeJSON(c, status, errorBody{Error: errorDetail{Code: ae.Code, Message: ae.Message, Field: ae.Field}})
	c.Abort()
}
