package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// checkTimeout bounds one readiness probe.
const checkTimeout = 2 * time.Second

// GET /healthz: the process serves requests.
func (a *API) healthz(c *gin.Context) {
	writeJSON(c, http.StatusOK, map[string]string{"status": "ok", "version": a.version})
}

type readyBody struct {
	Status string            `json:"status,omitempty"`
	Error  *errorDetail      `json:"error,omitempty"`
	Checks map[string]string `json:"checks"`
}

// GET /readyz: every check passes (the stores are reachable). A failure is a 503 whose message
// names the failing checks; "checks" has "ok" or the error of each.
func (a *API) readyz(c *gin.Context) {
	errs := make([]error, len(a.checks))
	var wg sync.WaitGroup
	for i, ch := range a.checks {
		wg.Go(func() { errs[i] = runCheck(c.Request.Context(), ch) })
	}
	wg.Wait()
	body := readyBody{Checks: make(map[string]string, len(a.checks))}
	var failed []string
	for i, ch := range a.checks {
		if errs[i] != nil {
			body.Checks[ch.Name] = errs[i].Error()
			failed = append(failed, ch.Name+": "+errs[i].Error())
			continue
		}
		body.Checks[ch.Name] = "ok"
	}
	if len(failed) > 0 {
		body.Error = &errorDetail{Code: codeNotReady, Message: strings.Join(failed, "; ")}
		writeJSON(c, statusOf(codeNotReady), body)
		return
	}
	body.Status = "ready"
	writeJSON(c, http.StatusOK, body)
}

// runCheck runs one probe; a panic in it is a failed check, not a crashed process (it runs
// outside the request goroutine and its recovery).
func runCheck(ctx context.Context, ch Check) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("check panicked: %v", v)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	return ch.Fn(ctx)
}
