package dao

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// Leases, durable retries and attempts of executions (migration 0003).
//
// An execution in flight is status running with an owner; the owner renews its lease
// (RenewExecution moves heartbeat_ms and updated_ms) while the callback runs. A running row
// whose updated_ms is older than the allowed missed beats has lost its owner:
// ResetStaleExecutions turns it back to pending, due now. A pending row with next_retry_ms
// due is claimed by one instance (ClaimDueRetries, a compare-and-set on status), which runs
// its next attempt. Every write of an owner checks the owner, so an instance that lost an
// execution can neither renew it nor overwrite the new owner's result.

// Attempt is one row of timer_task_attempt: one call of an execution's callback.
type Attempt struct {
	ID         int64  `db:"id" json:"-"`
	TaskID     int64  `db:"task_id" json:"-"`
	Attempt    int    `db:"attempt"`
	Owner      string `db:"owner"`
	StartedMS  int64  `db:"started_ms"`
	FinishedMS int64  `db:"finished_ms"`
	DurationMS int64  `db:"duration_ms"`
	HTTPStatus int    `db:"http_status"`
	Error      string `db:"error"`
}

const attemptCols = `id, task_id, attempt, owner, started_ms, finished_ms, duration_ms, http_status, error`

// RenewExecution renews the lease of a running execution owned by owner (heartbeat).
// held=false when the execution is no longer running under owner: it was taken over (or
// finished) and the caller must not write its result.
func (s *Store) RenewExecution(ctx context.Context, id int64, owner string, nowMS int64) (held bool, err error) {
	owner = truncate(owner, MaxOwnerLen)
	res, err := s.db.ExecContext(ctx, `UPDATE timer_task SET heartbeat_ms = ?, updated_ms = ?
	WHERE id = ? AND owner = ? AND status = ?`, nowMS, nowMS, id, owner, ExecRunning)
	if err != nil {
		return false, fmt.Errorf("dao: renew execution %d: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("dao: renew execution %d: %w", id, err)
	} else if n > 0 {
		return true, nil
	}
	// MySQL counts changed rows only: a renewal in the same millisecond matched but changed
	// nothing.
	var one int
	err = s.db.GetContext(ctx, &one, "SELECT 1 FROM timer_task WHERE id = ? AND owner = ? AND status = ?", id, owner, ExecRunning)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dao: renew execution %d: %w", id, err)
	}
	return true, nil
}

// RecordAttemptParams is the outcome of one attempt of a running execution.
type RecordAttemptParams struct {
	ID      int64
	Owner   string // only the owner may record
	Attempt int    // the execution's attempt number being recorded
	// Status: succeeded or failed (final), or pending: a retry is due at NextRetryMS.
	Status      string
	NextRetryMS int64
	HTTPStatus  int
	Error       string
	Response    string
	StartedMS   int64
	DurationMS  int64
	NowMS       int64
}

// RecordAttempt writes an attempt row and the execution's new state in one transaction,
// where id, owner and attempt match a running execution; ErrNotFound when not (the
// execution was lost to another instance). Recording the same attempt again succeeds.
// A pending execution keeps no owner: the retry poller of any instance claims it.
func (s *Store) RecordAttempt(ctx context.Context, p RecordAttemptParams) error {
	switch p.Status {
	case ExecSucceeded, ExecFailed:
	case ExecPending:
		if p.NextRetryMS <= 0 {
			return fmt.Errorf("dao: record attempt of execution %d: pending without next_retry_ms", p.ID)
		}
	default:
		return fmt.Errorf("dao: record attempt of execution %d: bad status %q", p.ID, p.Status)
	}
	owner := truncate(p.Owner, MaxOwnerLen)
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, recordUpdateQuery, recordUpdateArgs(p)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			// Written already by this owner (a retried write whose first answer was lost)?
			var one int
			err := tx.GetContext(ctx, &one, "SELECT 1 FROM timer_task_attempt WHERE task_id = ? AND attempt = ? AND owner = ?",
				p.ID, p.Attempt, owner)
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		_, err = tx.ExecContext(ctx, recordInsertQuery+s.ignoreDuplicateClause("timer_task_attempt", "task_id, attempt"),
			recordInsertArgs(p)...)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("dao: record attempt %d of execution %d: %w", p.Attempt, p.ID, err)
	}
	return nil
}

// recordUpdateQuery writes an attempt's outcome into its execution where id, owner and
// attempt match a running one (recordUpdateArgs). A pending execution keeps no owner.
const recordUpdateQuery = `UPDATE timer_task SET status = ?, owner = ?, next_retry_ms = ?,
	http_status = ?, error = ?, response = ?, duration_ms = ?, finished_ms = ?, updated_ms = ?
	WHERE id = ? AND owner = ? AND attempt = ? AND status = ?`

func recordUpdateArgs(p RecordAttemptParams) []any {
	owner := truncate(p.Owner, MaxOwnerLen)
	newOwner, finished, next := owner, p.NowMS, int64(0)
	if p.Status == ExecPending {
		newOwner, finished, next = "", 0, p.NextRetryMS
	}
	return []any{p.Status, newOwner, next, p.HTTPStatus, truncate(p.Error, MaxErrorLen), truncate(p.Response, MaxResponseLen),
		p.DurationMS, finished, p.NowMS, p.ID, owner, p.Attempt, ExecRunning}
}

// recordInsertQuery is an attempt's row (recordInsertArgs); the caller appends
// ignoreDuplicateClause.
const recordInsertQuery = `INSERT INTO timer_task_attempt (task_id, attempt, owner, started_ms, finished_ms,
	duration_ms, http_status, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

func recordInsertArgs(p RecordAttemptParams) []any {
	return []any{p.ID, p.Attempt, truncate(p.Owner, MaxOwnerLen), p.StartedMS, p.NowMS, p.DurationMS, p.HTTPStatus,
		truncate(p.Error, MaxErrorLen)}
}

// ListAttempts returns an execution's attempts, first to last.
func (s *Store) ListAttempts(ctx context.Context, taskID int64) ([]Attempt, error) {
	as := []Attempt{}
	if err := s.db.SelectContext(ctx, &as, "SELECT "+attemptCols+" FROM timer_task_attempt WHERE task_id = ? ORDER BY attempt",
		taskID); err != nil {
		return nil, fmt.Errorf("dao: list attempts of execution %d: %w", taskID, err)
	}
	return as, nil
}

// ClaimRetriesParams selects due pending executions to claim.
type ClaimRetriesParams struct {
	Owner string
	NowMS int64
	Limit int // <= 0 means 100
}

// ClaimDueRetries claims up to Limit pending executions whose next_retry_ms is due, oldest
// first: each with a compare-and-set on its status, so of instances polling at once exactly
// one gets each. The claimed rows come back running under Owner with attempt incremented
// (the attempt now to make).
func (s *Store) ClaimDueRetries(ctx context.Context, p ClaimRetriesParams) ([]Execution, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	var ids []int64
	if err := s.db.SelectContext(ctx, &ids, `SELECT id FROM timer_task WHERE status = ? AND next_retry_ms > 0
	AND next_retry_ms <= ? ORDER BY next_retry_ms LIMIT ?`, ExecPending, p.NowMS, p.Limit); err != nil {
		return nil, fmt.Errorf("dao: find due retries: %w", err)
	}
	owner := truncate(p.Owner, MaxOwnerLen)
	var won []int64
	for _, id := range ids {
		res, err := s.db.ExecContext(ctx, `UPDATE timer_task SET status = ?, owner = ?, attempt = attempt + 1,
		heartbeat_ms = ?, next_retry_ms = 0, updated_ms = ?
		WHERE id = ? AND status = ? AND next_retry_ms > 0 AND next_retry_ms <= ?`,
			ExecRunning, owner, p.NowMS, p.NowMS, id, ExecPending, p.NowMS)
		if err != nil {
			if isRetryable(err) {
				continue // another instance holds the row; it is claiming it
			}
			return s.claimedRows(ctx, won, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.claimedRows(ctx, won, err)
		} else if n == 1 {
			won = append(won, id)
		}
	}
	return s.claimedRows(ctx, won, nil)
}

// claimedRows reads back the rows won so far; they are returned even when a later claim
// failed (cause), since they are now this caller's to run.
func (s *Store) claimedRows(ctx context.Context, ids []int64, cause error) ([]Execution, error) {
	if cause != nil {
		cause = fmt.Errorf("dao: claim due retries: %w", cause)
	}
	if len(ids) == 0 {
		return nil, cause
	}
	q, args, err := sqlx.In("SELECT "+execCols+" FROM timer_task WHERE id IN (?) ORDER BY id", ids)
	if err != nil {
		return nil, errors.Join(cause, fmt.Errorf("dao: read claimed retries: %w", err))
	}
	var es []Execution
	if err := s.db.SelectContext(ctx, &es, s.db.Rebind(q), args...); err != nil {
		return nil, errors.Join(cause, fmt.Errorf("dao: read claimed retries: %w", err))
	}
	return es, cause
}

// ResetStaleParams selects running executions whose owner stopped renewing them.
type ResetStaleParams struct {
	// StaleBeforeMS: running rows last renewed (updated_ms) before this are reset.
	StaleBeforeMS int64
	NowMS         int64
	Limit         int // <= 0 means 100
}

// ResetStaleExecutions resets running executions not renewed since StaleBeforeMS to pending,
// due now, without owner: each with a compare-and-set on (status, owner, updated_ms), so
// of instances scanning at once exactly one resets each, and an owner that renews in the
// meantime keeps it. It returns the executions it reset (as they were before).
func (s *Store) ResetStaleExecutions(ctx context.Context, p ResetStaleParams) ([]Execution, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	var stale []Execution
	if err := s.db.SelectContext(ctx, &stale, "SELECT "+execCols+` FROM timer_task WHERE status = ? AND updated_ms < ?
	ORDER BY updated_ms LIMIT ?`, ExecRunning, p.StaleBeforeMS, p.Limit); err != nil {
		return nil, fmt.Errorf("dao: find stale executions: %w", err)
	}
	var reset []Execution
	for _, e := range stale {
		res, err := s.db.ExecContext(ctx, `UPDATE timer_task SET status = ?, owner = '', next_retry_ms = ?, updated_ms = ?
		WHERE id = ? AND status = ? AND owner = ? AND updated_ms = ?`,
			ExecPending, p.NowMS, p.NowMS, e.ID, ExecRunning, e.Owner, e.UpdatedMS)
		if err != nil {
			if isRetryable(err) {
				continue
			}
			return reset, fmt.Errorf("dao: reset stale execution %d: %w", e.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return reset, fmt.Errorf("dao: reset stale execution %d: %w", e.ID, err)
		} else if n == 1 {
			reset = append(reset, e)
		}
	}
	return reset, nil
}

// HandBackExecution returns a running execution owned by owner to pending, due at once,
// without owner (graceful shutdown): another instance's retry poller takes it within its
// poll interval. ErrNotFound when owner no longer holds it.
func (s *Store) HandBackExecution(ctx context.Context, id int64, owner string, nowMS int64) error {
	res, err := s.db.ExecContext(ctx, `UPDATE timer_task SET status = ?, owner = '', next_retry_ms = ?, updated_ms = ?
	WHERE id = ? AND owner = ? AND status = ?`, ExecPending, nowMS, nowMS, id, truncate(owner, MaxOwnerLen), ExecRunning)
	if err != nil {
		return fmt.Errorf("dao: hand back execution %d: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("dao: hand back execution %d: %w", id, err)
	} else if n == 0 {
		return ErrNotFound
	}
	return nil
}

// ExecutionTimes are the lease columns of an execution (tests and diagnostics).
type ExecutionTimes struct {
	HeartbeatMS int64 `db:"heartbeat_ms"`
	NextRetryMS int64 `db:"next_retry_ms"`
}

// GetExecutionTimes returns an execution's heartbeat_ms and next_retry_ms.
func (s *Store) GetExecutionTimes(ctx context.Context, id int64) (ExecutionTimes, error) {
	return getRow[ExecutionTimes](ctx, s.db, "execution times",
		"SELECT heartbeat_ms, next_retry_ms FROM timer_task WHERE id = ?", id)
}
