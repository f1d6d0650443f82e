package dao

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

const execCols = `id, timer_id, scheduled_ms, status, attempt, owner, timer_version, started_ms,
	finished_ms, duration_ms, http_status, error, response, created_ms, updated_ms, manual`

// Column limits of timer_task (characters); longer values are cut on write.
const (
	MaxOwnerLen    = 128
	MaxErrorLen    = 1024
	MaxResponseLen = 1024
)

// claimAttempts bounds retries of a claim that lost an InnoDB deadlock or SQLite busy wait.
const claimAttempts = 5

// ClaimParams identifies an occurrence to claim for execution.
type ClaimParams struct {
	TimerID      int64
	ScheduledMS  int64
	TimerVersion int64 // claim only if the timer is enabled at exactly this version
	Owner        string
	NowMS        int64
}

// ClaimExecution atomically inserts the timer_task row (status running, attempt 1, started_ms
// NowMS) for the occurrence, only if the timer is enabled at TimerVersion. claimed=true
// returns the new row. claimed=false when the row exists already (existing is returned) or
// the timer changed (existing.ID == 0).
//
// One statement both checks the timer and inserts, so a timer updated or deleted in between
// cannot be claimed at its old version, and of concurrent claimers exactly one inserts.
func (s *Store) ClaimExecution(ctx context.Context, p ClaimParams) (existing Execution, claimed bool, err error) {
	q := claimQuery + s.ignoreDuplicateClause("timer_task", "timer_id, scheduled_ms")
	args := claimArgs(p)

	var res sql.Result
	for attempt := 1; ; attempt++ {
		res, err = s.db.ExecContext(ctx, q, args...)
		if err == nil || !isRetryable(err) || attempt == claimAttempts || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return Execution{}, false, fmt.Errorf("dao: claim %s: %w", Key(p.TimerID, p.ScheduledMS), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Execution{}, false, fmt.Errorf("dao: claim %s: %w", Key(p.TimerID, p.ScheduledMS), err)
	}
	e, err := s.executionByOccurrence(ctx, p.TimerID, p.ScheduledMS)
	switch {
	case errors.Is(err, ErrNotFound) && n == 0:
		return Execution{}, false, nil // the timer is not enabled at that version
	case err != nil:
		return Execution{}, false, fmt.Errorf("dao: claim %s: read back: %w", Key(p.TimerID, p.ScheduledMS), err)
	}
	return e, n == 1, nil
}

// ManualParams names a manual execution: the timer fired once by hand at ScheduledMS.
type ManualParams struct {
	TimerID     int64
	ScheduledMS int64
	NowMS       int64
}

// CreateManualExecution inserts a manual execution of an enabled timer as pending, due at
// NowMS, so the retry poller of any instance running the engine claims it and makes its first
// attempt (an API-only instance can create it). created=false when the occurrence has an
// execution already (it is returned: the same request made twice fires once) or the timer is
// not enabled (existing.ID == 0).
func (s *Store) CreateManualExecution(ctx context.Context, p ManualParams) (existing Execution, created bool, err error) {
	key := Key(p.TimerID, p.ScheduledMS)
	due := max(p.NowMS, 1) // next_retry_ms = 0 means "no attempt due"
	q := `INSERT INTO timer_task (timer_id, scheduled_ms, status, attempt, owner, timer_version,
		started_ms, finished_ms, duration_ms, http_status, error, response, created_ms, updated_ms,
		next_retry_ms, manual)
	SELECT id, ?, ?, 0, '', version, 0, 0, 0, 0, '', '', ?, ?, ?, 1
	FROM timer WHERE id = ? AND status = ?` + s.ignoreDuplicateClause("timer_task", "timer_id, scheduled_ms")
	res, err := s.db.ExecContext(ctx, q, p.ScheduledMS, ExecPending, p.NowMS, p.NowMS, due, p.TimerID, StatusEnabled)
	if err != nil {
		return Execution{}, false, fmt.Errorf("dao: create manual execution %s: %w", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Execution{}, false, fmt.Errorf("dao: create manual execution %s: %w", key, err)
	}
	e, err := s.executionByOccurrence(ctx, p.TimerID, p.ScheduledMS)
	switch {
	case errors.Is(err, ErrNotFound) && n == 0:
		return Execution{}, false, nil
	case err != nil:
		return Execution{}, false, fmt.Errorf("dao: create manual execution %s: read back: %w", key, err)
	}
	return e, n == 1, nil
}

// claimQuery inserts one occurrence's execution if its timer is enabled at the version
// (claimArgs); the caller appends ignoreDuplicateClause.
const claimQuery = `INSERT INTO timer_task (timer_id, scheduled_ms, status, attempt, owner, timer_version,
		started_ms, finished_ms, duration_ms, http_status, error, response, created_ms, updated_ms)
	SELECT id, ?, ?, 1, ?, version, ?, 0, 0, 0, '', '', ?, ?
	FROM timer WHERE id = ? AND status = ? AND version = ?`

func claimArgs(p ClaimParams) []any {
	return []any{p.ScheduledMS, ExecRunning, truncate(p.Owner, MaxOwnerLen), claimStartedMS(p), p.NowMS, p.NowMS,
		p.TimerID, StatusEnabled, p.TimerVersion}
}

// claimStartedMS is the started_ms of a claimed execution: an occurrence claimed ahead of its
// time (executor.Config.ClaimAhead) starts at its time, never before.
func claimStartedMS(p ClaimParams) int64 {
	return max(p.NowMS, p.ScheduledMS)
}

func (s *Store) executionByOccurrence(ctx context.Context, timerID, scheduledMS int64) (Execution, error) {
	return getRow[Execution](ctx, s.db, "get execution of timer",
		"SELECT "+execCols+" FROM timer_task WHERE timer_id = ? AND scheduled_ms = ?", timerID, scheduledMS)
}

// FinishParams records the outcome of an attempt.
type FinishParams struct {
	ID         int64
	Owner      string // only the owner may write the result
	Status     string // succeeded or failed
	HTTPStatus int
	Error      string // cut to MaxErrorLen characters
	Response   string // cut to MaxResponseLen characters
	DurationMS int64
	NowMS      int64
}

// FinishExecution writes the result where id and owner match; ErrNotFound when not (lost).
// Writing the same result twice succeeds.
func (s *Store) FinishExecution(ctx context.Context, p FinishParams) error {
	if p.Status == "" {
		return fmt.Errorf("dao: finish execution %d: empty status", p.ID)
	}
	owner := truncate(p.Owner, MaxOwnerLen)
	res, err := s.db.ExecContext(ctx, `UPDATE timer_task SET status = ?, http_status = ?, error = ?, response = ?,
	duration_ms = ?, finished_ms = ?, updated_ms = ? WHERE id = ? AND owner = ?`,
		p.Status, p.HTTPStatus, truncate(p.Error, MaxErrorLen), truncate(p.Response, MaxResponseLen),
		p.DurationMS, p.NowMS, p.NowMS, p.ID, owner)
	if err != nil {
		return fmt.Errorf("dao: finish execution %d: %w", p.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("dao: finish execution %d: %w", p.ID, err)
	}
	if n > 0 {
		return nil
	}
	// MySQL counts only changed rows: an identical second write affects 0 rows but matched.
	var one int
	err = s.db.GetContext(ctx, &one, "SELECT 1 FROM timer_task WHERE id = ? AND owner = ?", p.ID, owner)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("dao: finish execution %d: %w", p.ID, err)
	}
	return nil
}

// GetExecution returns one execution; ErrNotFound when absent.
func (s *Store) GetExecution(ctx context.Context, id int64) (Execution, error) {
	return getRow[Execution](ctx, s.db, "get execution", "SELECT "+execCols+" FROM timer_task WHERE id = ?", id)
}

// ListExecutionsParams filters a timer's executions ordered by id ascending.
type ListExecutionsParams struct {
	TimerID int64
	Status  string // optional
	FromMS  int64  // optional, scheduled_ms >= FromMS when > 0
	ToMS    int64  // optional, scheduled_ms < ToMS when > 0
	AfterID int64
	Limit   int // <= 0 means DefaultLimit
}

// ListExecutions returns a page of one timer's executions (deleted timers' too: the caller
// decides whether to show them).
func (s *Store) ListExecutions(ctx context.Context, p ListExecutionsParams) ([]Execution, error) {
	q := "SELECT " + execCols + " FROM timer_task WHERE timer_id = ? AND id > ?"
	args := []any{p.TimerID, p.AfterID}
	if p.Status != "" {
		q += " AND status = ?"
		args = append(args, p.Status)
	}
	if p.FromMS > 0 {
		q += " AND scheduled_ms >= ?"
		args = append(args, p.FromMS)
	}
	if p.ToMS > 0 {
		q += " AND scheduled_ms < ?"
		args = append(args, p.ToMS)
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, limitOrDefault(p.Limit))
	es := []Execution{}
	if err := s.db.SelectContext(ctx, &es, q, args...); err != nil {
		return nil, fmt.Errorf("dao: list executions of timer %d: %w", p.TimerID, err)
	}
	return es, nil
}

// truncate makes s valid UTF-8 (a callback may answer with any bytes; MySQL utf8mb4 rejects
// invalid sequences) and cuts it to at most n characters, never inside one.
func truncate(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
