package dao

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tockd/tock/schedule"
)

// Sentinel errors; the API maps them to HTTP codes in one table.
var (
	ErrNotFound  = errors.New("dao: not found")
	ErrNameTaken = errors.New("dao: timer name already used in this app")
	// ErrVersionConflict: the row changed since it was read (optimistic locking).
	ErrVersionConflict = errors.New("dao: version conflict")
)

// Timer status values.
const (
	StatusEnabled   = "enabled"
	StatusDisabled  = "disabled"
	StatusCompleted = "completed"
	StatusDeleted   = "deleted"
)

// Execution status values.
const (
	ExecPending   = "pending"
	ExecRunning   = "running"
	ExecSucceeded = "succeeded"
	ExecFailed    = "failed"
	ExecMissed    = "missed"
)

// Timer is one row of table timer: a timer's definition. Times are UTC unix milliseconds.
type Timer struct {
	ID     int64  `db:"id"`
	App    string `db:"app"`
	Name   string `db:"name"`
	Status string `db:"status"`
	// Schedule is the normalized spec ("in" already turned into "at").
	Schedule JSONSpec `db:"schedule"`
	// AnchorMS is where an "every" schedule counts from: set when the schedule is set.
	AnchorMS int64       `db:"anchor_ms"`
	Callback Callback    `db:"callback"`
	Retry    RetryPolicy `db:"retry"`
	// Misfire is what becomes of occurrences missed while no instance ran: MisfireFireAll
	// (the default when empty), MisfireFireOnce or MisfireSkip (compensation.go).
	Misfire string `db:"misfire"`
	// RequestID is the client's idempotency key (unique per app); empty when not given.
	RequestID string `db:"request_id"`
	// RequestHash fingerprints the create body sent with RequestID, to answer 409 when the
	// same key comes back with another body.
	RequestHash string `db:"request_hash"`
	Version     int64  `db:"version"`
	CreatedMS   int64  `db:"created_ms"`
	UpdatedMS   int64  `db:"updated_ms"`
}

// JSONSpec stores a schedule.Spec as JSON text.
type JSONSpec schedule.Spec

// Callback is the HTTP request tock sends for each occurrence.
type Callback struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	// TimeoutMS bounds one attempt.
	TimeoutMS int64 `json:"timeout_ms"`
}

// RetryPolicy is stored with the timer; the reliability issue's executor applies it.
type RetryPolicy struct {
	MaxAttempts  int   `json:"max_attempts"`
	BackoffMS    int64 `json:"backoff_ms"`
	MaxBackoffMS int64 `json:"max_backoff_ms"`
}

// Execution is one row of table timer_task: one occurrence (timer, scheduled time) and its
// attempts so far.
type Execution struct {
	ID           int64  `db:"id"`
	TimerID      int64  `db:"timer_id"`
	ScheduledMS  int64  `db:"scheduled_ms"`
	Status       string `db:"status"`
	Attempt      int    `db:"attempt"`
	Owner        string `db:"owner"`
	TimerVersion int64  `db:"timer_version"`
	// StartedMS, FinishedMS: 0 means not yet.
	StartedMS  int64  `db:"started_ms"`
	FinishedMS int64  `db:"finished_ms"`
	DurationMS int64  `db:"duration_ms"`
	HTTPStatus int    `db:"http_status"`
	Error      string `db:"error"`
	Response   string `db:"response"`
	CreatedMS  int64  `db:"created_ms"`
	UpdatedMS  int64  `db:"updated_ms"`
	// Manual: fired by hand (batch trigger), outside the timer's schedule.
	Manual bool `db:"manual"`
}

// Key is the idempotency key of an occurrence, "<timer_id>:<scheduled unix ms>": the same
// string is the Redis ZSET member and the callback's Idempotency-Key header; the pair is the
// UNIQUE key of timer_task.
func Key(timerID, scheduledMS int64) string {
	return strconv.FormatInt(timerID, 10) + ":" + strconv.FormatInt(scheduledMS, 10)
}

// ParseKey splits an idempotency key.
func ParseKey(key string) (timerID, scheduledMS int64, err error) {
	a, b, ok := strings.Cut(key, ":")
	if ok {
		if timerID, err = strconv.ParseInt(a, 10, 64); err == nil {
			if scheduledMS, err = strconv.ParseInt(b, 10, 64); err == nil {
				return timerID, scheduledMS, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("dao: bad occurrence key %q", key)
}

func scanJSON(src any, dst any) error {
	var b []byte
	switch v := src.(type) {
	case []byte:
		b = v
	case string:
		b = []byte(v)
	case nil:
		return nil
	default:
		return fmt.Errorf("dao: cannot scan %T as JSON", src)
	}
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, dst)
}

func valueJSON(v any) (driver.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func (s *JSONSpec) Scan(src any) error          { return scanJSON(src, (*schedule.Spec)(s)) }
func (s JSONSpec) Value() (driver.Value, error) { return valueJSON(schedule.Spec(s)) }
func (c *Callback) Scan(src any) error          { return scanJSON(src, (*callbackJSON)(c)) }
func (c Callback) Value() (driver.Value, error) { return valueJSON(callbackJSON(c)) }
func (r *RetryPolicy) Scan(src any) error       { return scanJSON(src, (*retryJSON)(r)) }
func (r RetryPolicy) Value() (driver.Value, error) {
	return valueJSON(retryJSON(r))
}

// Aliases without the Scan/Value methods, so json does not recurse into them.
type (
	callbackJSON Callback
	retryJSON    RetryPolicy
)
