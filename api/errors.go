package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

// Error codes of the API. Every error response is
//
//	{"error": {"code": "<code>", "message": "<text for humans>", "field": "<json path>"}}
//
// with field omitted when no single field is at fault.
const (
	codeInvalidJSON      = "invalid_json"
	codeUnknownField     = "unknown_field"
	codeInvalidField     = "invalid_field"
	codeInvalidQuery     = "invalid_query"
	codeInvalidLimit     = "invalid_limit"
	codeInvalidCursor    = "invalid_cursor"
	codeInvalidStatus    = "invalid_status"
	codeInvalidApp       = "invalid_app"
	codeInvalidTime      = "invalid_time"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeNameTaken        = "name_taken"
	codeIdempotency      = "idempotency_conflict"
	codeTimerCompleted   = "timer_completed"
	codeVersionConflict  = "version_conflict"
	codeBodyTooLarge     = "body_too_large"
	codeMissingField     = "missing_field"
	codeInvalidValue     = "invalid_value"
	codeInvalidURL       = "invalid_url"
	codeInvalidHeader    = "invalid_header"
	codeInvalidSchedule  = "invalid_schedule"
	codeUnknownTimezone  = "unknown_timezone"
	codeNeverFires       = "schedule_never_fires"
	codeUnknownOperation = "unknown_operation"
	codeEmptyTarget      = "empty_target"
	codeNoMatch          = "no_match"
	codeUnknownTimers    = "unknown_timers"
	codeTooManyTargets   = "too_many_targets"
	codeBatchRunning     = "batch_running"
	codeBatchFinished    = "batch_finished"
	codeBatchRolledBack  = "batch_rolled_back"
	codeNotReversible    = "not_reversible"
	codeInternal         = "internal"
	codeStoreUnavailable = "store_unavailable"
	codeNotReady         = "not_ready"
)

// errorTable is the one place that maps error kinds to an HTTP status and a code. A kind is
// either a code produced by the API's own validation (sentinel nil) or a sentinel error of a
// package below (matched with errors.Is). Request syntax problems are 400, well-formed values
// that are not acceptable are 422, state conflicts are 409.
var errorTable = []struct {
	code     string
	status   int
	sentinel error
}{
	// The body is not a JSON object (syntax error, empty, trailing data, not an object).
	{codeInvalidJSON, http.StatusBadRequest, nil},
	// A field the endpoint does not know; field names it (e.g. "callback.retries").
	{codeUnknownField, http.StatusBadRequest, nil},
	// A field of the wrong JSON type (a number where a string belongs).
	{codeInvalidField, http.StatusBadRequest, nil},
	// Query parameters of the list endpoints: a query string that is not one (bad escapes),
	// then each parameter.
	{codeInvalidQuery, http.StatusBadRequest, nil},
	{codeInvalidLimit, http.StatusBadRequest, nil},
	{codeInvalidCursor, http.StatusBadRequest, nil},
	{codeInvalidStatus, http.StatusBadRequest, nil},
	{codeInvalidApp, http.StatusBadRequest, nil},
	{codeInvalidTime, http.StatusBadRequest, nil},
	// Unknown route, unknown or deleted timer or execution, or an id that is not a positive
	// integer (no such resource can exist).
	{codeNotFound, http.StatusNotFound, dao.ErrNotFound},
	{codeMethodNotAllowed, http.StatusMethodNotAllowed, nil},
	// Another non-deleted timer of the app has the name.
	{codeNameTaken, http.StatusConflict, dao.ErrNameTaken},
	// request_id reused with a different body.
	{codeIdempotency, http.StatusConflict, nil},
	// Enabling a completed one-shot; PATCH a new schedule instead.
	{codeTimerCompleted, http.StatusConflict, nil},
	// The timer kept changing under a PATCH/enable/disable; retry the request.
	{codeVersionConflict, http.StatusConflict, dao.ErrVersionConflict},
	// Body over MaxBodyBytes.
	{codeBodyTooLarge, http.StatusRequestEntityTooLarge, nil},
	// Well-formed JSON whose values are not acceptable.
	{codeMissingField, http.StatusUnprocessableEntity, nil},
	{codeInvalidValue, http.StatusUnprocessableEntity, nil},
	{codeInvalidURL, http.StatusUnprocessableEntity, nil},
	{codeInvalidHeader, http.StatusUnprocessableEntity, nil},
	// Codes of schedule.Error.
	{codeInvalidSchedule, http.StatusUnprocessableEntity, nil},
	{codeUnknownTimezone, http.StatusUnprocessableEntity, nil},
	{codeNeverFires, http.StatusUnprocessableEntity, nil},
	// Batches (batches.go): an operation no handler is registered for; a target listing no
	// timer; a selector matching none; listed ids naming no live timer; more timers than a
	// batch may hold.
	{codeUnknownOperation, http.StatusUnprocessableEntity, nil},
	{codeEmptyTarget, http.StatusUnprocessableEntity, nil},
	{codeNoMatch, http.StatusUnprocessableEntity, nil},
	{codeUnknownTimers, http.StatusUnprocessableEntity, nil},
	{codeTooManyTargets, http.StatusUnprocessableEntity, nil},
	// Rollback of a batch still running; cancel of a finished one; rollback of one rolled
	// back already; rollback of an operation that cannot be undone (trigger).
	{codeBatchRunning, http.StatusConflict, nil},
	{codeBatchFinished, http.StatusConflict, nil},
	{codeBatchRolledBack, http.StatusConflict, nil},
	{codeNotReversible, http.StatusConflict, nil},
	// A panic, recovered. Tests and fuzzing show no input reaches it.
	{codeInternal, http.StatusInternalServerError, nil},
	// The store failed (outage, timeout): the request may be retried.
	{codeStoreUnavailable, http.StatusServiceUnavailable, nil},
	// /readyz: a dependency is not reachable.
	{codeNotReady, http.StatusServiceUnavailable, nil},
}

// statusOf returns the HTTP status of a code; an unknown code is a bug and answers 500.
func statusOf(code string) int {
	for _, e := range errorTable {
		if e.code == code {
			return e.status
		}
	}
	return http.StatusInternalServerError
}

// apiError is an error answered to the client.
type apiError struct {
	Code    string
	Field   string
	Message string
	// Err is the cause, logged when the status is 5xx; never shown to clients.
	Err error
}

func (e *apiError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return e.Code + ": " + e.Message
}

func (e *apiError) status() int { return statusOf(e.Code) }

func newError(code, field, format string, args ...any) *apiError {
	return &apiError{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// asAPIError turns any error of a handler into an apiError: the API's own errors pass
// through, schedule errors keep their code and field, dao sentinels go through errorTable and
// anything else is a store outage.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var se *schedule.Error
	if errors.As(err, &se) {
		code := se.Code
		if statusOf(code) == http.StatusInternalServerError {
			code = codeInvalidSchedule
		}
		return &apiError{Code: code, Field: se.Field, Message: se.Message}
	}
	for _, e := range errorTable {
		if e.sentinel != nil && errors.Is(err, e.sentinel) {
			return &apiError{Code: e.code, Message: sentinelMessage(e.code), Err: err}
		}
	}
	msg := "the store is unavailable; retry later"
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		msg = "the request was canceled or timed out"
	}
	return &apiError{Code: codeStoreUnavailable, Message: msg, Err: err}
}

func sentinelMessage(code string) string {
	switch code {
	case codeNotFound:
		return "not found"
	case codeNameTaken:
		return "another timer of this app has that name"
	case codeVersionConflict:
		return "the timer changed concurrently; retry"
	}
	return code
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}
