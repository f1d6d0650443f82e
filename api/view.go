package api

import (
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

// Timer is the JSON form of a timer.
type Timer struct {
	ID       int64         `json:"id"`
	App      string        `json:"app"`
	Name     string        `json:"name"`
	Schedule schedule.Spec `json:"schedule"`
	Callback Callback      `json:"callback"`
	Retry    Retry         `json:"retry"`
	// Misfire: fire_all, fire_once or skip (occurrences missed while no instance ran).
	Misfire   string `json:"misfire"`
	Enabled   bool   `json:"enabled"`
	Status    string `json:"status"`
	RequestID string `json:"request_id,omitempty"`
	Version   int64  `json:"version"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
	// NextFireAt is null when the timer will not fire (disabled, completed, or no occurrence
	// in the next five years).
	NextFireAt *string `json:"next_fire_at"`
}

// Callback is the JSON form of a timer's callback; Timeout is a Go duration.
type Callback struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Timeout string            `json:"timeout"`
}

// Retry is the JSON form of a retry policy; durations are Go durations.
type Retry struct {
	MaxAttempts int    `json:"max_attempts"`
	Backoff     string `json:"backoff"`
	MaxBackoff  string `json:"max_backoff"`
}

// Execution is the JSON form of one occurrence's execution. Unset times and a missing HTTP
// status are null.
type Execution struct {
	ID          int64   `json:"id"`
	TimerID     int64   `json:"timer_id"`
	ScheduledAt string  `json:"scheduled_at"`
	Status      string  `json:"status"`
	Attempt     int     `json:"attempt"`
	StartedAt   *string `json:"started_at"`
	FinishedAt  *string `json:"finished_at"`
	DurationMS  int64   `json:"duration_ms"`
	HTTPStatus  *int    `json:"http_status"`
	Error       string  `json:"error"`
	Response    string  `json:"response"`
	Instance    string  `json:"instance"`
	// Manual: fired by hand (batch trigger), outside the timer's schedule.
	Manual bool `json:"manual"`
}

// List is the shape of every list response.
type List[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

func msTime(ms int64) string { return schedule.FormatTime(time.UnixMilli(ms)) }

func optTime(ms int64) *string {
	if ms == 0 {
		return nil
	}
	s := msTime(ms)
	return &s
}

func timerView(t dao.Timer, now time.Time) Timer {
	headers := t.Callback.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	return Timer{
		ID:       t.ID,
		App:      t.App,
		Name:     t.Name,
		Schedule: schedule.Spec(t.Schedule),
		Callback: Callback{
			URL:     t.Callback.URL,
			Method:  t.Callback.Method,
			Headers: headers,
			Body:    t.Callback.Body,
			Timeout: msDuration(t.Callback.TimeoutMS).String(),
		},
		Retry: Retry{
			MaxAttempts: t.Retry.MaxAttempts,
			Backoff:     msDuration(t.Retry.BackoffMS).String(),
			MaxBackoff:  msDuration(t.Retry.MaxBackoffMS).String(),
		},
		Misfire:    dao.MisfireOrDefault(t.Misfire),
		Enabled:    t.Status == dao.StatusEnabled,
		Status:     t.Status,
		RequestID:  t.RequestID,
		Version:    t.Version,
		CreatedAt:  msTime(t.CreatedMS),
		UpdatedAt:  msTime(t.UpdatedMS),
		NextFireAt: nextFireAt(t, now),
	}
}

// nextFireAt is the timer's next occurrence after now. An enabled one-shot whose time has
// passed has not fired yet (firing completes it), so it fires at once: its "at" is returned.
func nextFireAt(t dao.Timer, now time.Time) *string {
	if t.Status != dao.StatusEnabled {
		return nil
	}
	s, err := schedule.Parse(schedule.Spec(t.Schedule), time.UnixMilli(t.AnchorMS))
	if err != nil {
		return nil
	}
	var next time.Time
	if s.Kind() == schedule.KindAt {
		next = s.Next(time.Time{})
	} else {
		next = s.Next(now)
	}
	if next.IsZero() {
		return nil
	}
	v := schedule.FormatTime(next)
	return &v
}

func executionView(e dao.Execution) Execution {
	v := Execution{
		ID:          e.ID,
		TimerID:     e.TimerID,
		ScheduledAt: msTime(e.ScheduledMS),
		Status:      e.Status,
		Attempt:     e.Attempt,
		StartedAt:   optTime(e.StartedMS),
		FinishedAt:  optTime(e.FinishedMS),
		DurationMS:  e.DurationMS,
		Error:       e.Error,
		Response:    e.Response,
		Instance:    e.Owner,
		Manual:      e.Manual,
	}
	if e.HTTPStatus != 0 {
		s := e.HTTPStatus
		v.HTTPStatus = &s
	}
	return v
}

// ExecutionDetail is GET /api/v1/executions/{id}: the execution and each of its attempts.
type ExecutionDetail struct {
	Execution
	Attempts []Attempt `json:"attempts"`
}

// Attempt is the JSON form of one call of an execution's callback. A missing HTTP status
// (timeout, connection error) is null.
type Attempt struct {
	Attempt    int    `json:"attempt"`
	StartedAt  string `json:"started_at"`
	FinishedAt string `json:"finished_at"`
	DurationMS int64  `json:"duration_ms"`
	HTTPStatus *int   `json:"http_status"`
	Error      string `json:"error"`
	Instance   string `json:"instance"`
}

func attemptView(a dao.Attempt) Attempt {
	v := Attempt{Attempt: a.Attempt, StartedAt: msTime(a.StartedMS), FinishedAt: msTime(a.FinishedMS),
		DurationMS: a.DurationMS, Error: a.Error, Instance: a.Owner}
	if a.HTTPStatus != 0 {
		s := a.HTTPStatus
		v.HTTPStatus = &s
	}
	return v
}
