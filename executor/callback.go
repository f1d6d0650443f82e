package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

// Headers tock adds to every callback (documented in the README's callback contract).
const (
	HeaderTimerID        = "Tock-Timer-Id"
	HeaderScheduledAt    = "Tock-Scheduled-At"
	HeaderAttempt        = "Tock-Attempt"
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderManual is "true" on an occurrence fired by hand (batch trigger), absent otherwise.
	HeaderManual = "Tock-Manual"
)

// DefaultCallbackTimeout applies when a timer's callback has no timeout.
const DefaultCallbackTimeout = 5 * time.Second

// drainLimit is how much of a response beyond the excerpt is read so the connection can be
// reused; a longer body is abandoned with its connection.
const drainLimit = 64 << 10

// attemptResult is one HTTP call's outcome.
type attemptResult struct {
	httpStatus int
	err        string // empty on success
	// retryable: a timeout, a connection error, 408, 429 or 5xx; any other failure is final.
	retryable bool
	response  string // excerpt of the body
	duration  time.Duration
}

func (a attemptResult) ok() bool { return a.err == "" }

// attempt makes one call of the timer's callback for occ. It never panics: a panic while
// building or sending the request is a failed attempt.
func (e *Executor) attempt(ctx context.Context, t dao.Timer, occ Occurrence, attemptNo int) (res attemptResult) {
	start := e.clk.Now()
	defer func() {
		if p := recover(); p != nil {
			res = attemptResult{err: errorText(fmt.Sprintf("panic: %v", p))}
		}
		res.duration = e.clk.Since(start)
	}()

	cb := t.Callback
	timeout := time.Duration(cb.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = DefaultCallbackTimeout
	}
	// The timeout bounds network I/O, so it runs in wall time even under a fake clock.
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	method := cb.Method
	if method == "" {
		method = http.MethodPost
	}
	var body io.Reader
	if cb.Body != "" {
		body = strings.NewReader(cb.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, cb.URL, body)
	if err != nil {
		return attemptResult{err: errorText("build request: " + err.Error())}
	}
	for k, v := range cb.Headers {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "tock")
	}
	// Set after the timer's headers: these are tock's and cannot be overridden.
	req.Header.Set(HeaderTimerID, strconv.FormatInt(occ.TimerID, 10))
	req.Header.Set(HeaderScheduledAt, schedule.FormatTime(time.UnixMilli(occ.ScheduledMS)))
	req.Header.Set(HeaderAttempt, strconv.Itoa(max(attemptNo, 1)))
	if occ.Manual {
		req.Header.Set(HeaderManual, "true")
	}
	req.Header.Set(HeaderIdempotencyKey, occ.Key())

	resp, err := e.client.Do(req)
	if err != nil {
		return attemptResult{err: errorText(describe(err, timeout)), retryable: true}
	}
	excerpt, readErr := io.ReadAll(io.LimitReader(resp.Body, int64(e.cfg.ResponseExcerptBytes)))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
	res = attemptResult{httpStatus: resp.StatusCode, response: string(excerpt)}
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		res.err = "callback answered " + resp.Status
		res.retryable = RetryableStatus(resp.StatusCode)
	case readErr != nil:
		// The status line counts: the callback accepted the occurrence.
		e.log.Debug("reading callback response", "timer_id", occ.TimerID, "err", readErr)
	}
	return res
}

// RetryableStatus reports whether a callback's non-2xx answer is worth another attempt:
// 408, 429 and 5xx; any other is final.
func RetryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
}

// describe turns a transport error into the text recorded with the execution.
func describe(err error, timeout time.Duration) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Sprintf("timeout after %s: %v", timeout, err)
	}
	return err.Error()
}

// errorText bounds an error message to what timer_task keeps.
func errorText(s string) string {
	if len(s) > dao.MaxErrorLen {
		return s[:dao.MaxErrorLen]
	}
	return s
}
