package dao

// Tables batch_job and batch_task (sql/*/0002_batch.sql): batch operations over many timers,
// run by package batch. Every write of a task is a compare-and-set on (id, version[, status]):
// no transaction is held across a task's work, so any number of instances may run the same
// batches and a dead instance leaves nothing locked.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"

	"github.com/tockd/tock/schedule"
)

// ErrBatchState: the batch is not in a status that allows the change (cancel of a finished
// batch, rollback of a running one). The batch is returned with it, so the caller can say why.
var ErrBatchState = errors.New("dao: batch status does not allow this")

// Batch task statuses. Forward: pending -> running -> success | fail (a retry goes back to
// pending); rollback: rollback_pending -> rollback_running -> rollback_success |
// rollback_fail; cancel ends a task that never started.
const (
	TaskPending         = "pending"
	TaskRunning         = "running"
	TaskSuccess         = "success"
	TaskFail            = "fail"
	TaskCancel          = "cancel"
	TaskRollbackPending = "rollback_pending"
	TaskRollbackRunning = "rollback_running"
	TaskRollbackSuccess = "rollback_success"
	TaskRollbackFail    = "rollback_fail"
)

// TaskStatuses lists every task status, in the order of the lifecycle.
var TaskStatuses = []string{
	TaskPending, TaskRunning, TaskSuccess, TaskFail, TaskCancel,
	TaskRollbackPending, TaskRollbackRunning, TaskRollbackSuccess, TaskRollbackFail,
}

// Batch statuses, aggregated from the tasks' (package batch).
const (
	BatchPending         = "pending"
	BatchRunning         = "running"
	BatchSuccess         = "success"
	BatchFail            = "fail"
	BatchPartialFail     = "partial_fail"
	BatchCancel          = "cancel"
	BatchRollbackRunning = "rollback_running"
	BatchRollbackSuccess = "rollback_success"
	BatchRollbackFail    = "rollback_fail"
)

// BatchStatuses lists every batch status.
var BatchStatuses = []string{
	BatchPending, BatchRunning, BatchSuccess, BatchFail, BatchPartialFail, BatchCancel,
	BatchRollbackRunning, BatchRollbackSuccess, BatchRollbackFail,
}

// BatchJob is one row of batch_job: one operation over a set of timers. Times are UTC unix
// milliseconds; 0 means not yet.
type BatchJob struct {
	ID        int64  `db:"id"`
	App       string `db:"app"`
	Operation string `db:"operation"`
	Status    string `db:"status"`
	// Target is the target as given, JSON (a selector, or how many ids were listed).
	Target string `db:"target"`
	// Params are the operation's parameters, JSON; "" when none.
	Params             string `db:"params"`
	RequestID          string `db:"request_id"`
	RequestHash        string `db:"request_hash"`
	Total              int    `db:"total"`
	Version            int64  `db:"version"`
	CreatedMS          int64  `db:"created_ms"`
	UpdatedMS          int64  `db:"updated_ms"`
	StartedMS          int64  `db:"started_ms"`
	FinishedMS         int64  `db:"finished_ms"`
	RollbackStartedMS  int64  `db:"rollback_started_ms"`
	RollbackFinishedMS int64  `db:"rollback_finished_ms"`
}

// BatchTask is one row of batch_task: the operation on one timer.
type BatchTask struct {
	ID      int64  `db:"id"`
	BatchID int64  `db:"batch_id"`
	TimerID int64  `db:"timer_id"`
	Status  string `db:"status"`
	// Retry counts the retries of the current phase (forward or rollback).
	Retry   int    `db:"retry"`
	Version int64  `db:"version"`
	Owner   string `db:"owner"`
	// DeadlineMS: a running task not released by then is taken back.
	DeadlineMS int64 `db:"deadline_ms"`
	// Before and After are the timer before and after the change, once recorded.
	Before     TimerImage `db:"before_image"`
	After      TimerImage `db:"after_image"`
	Error      string     `db:"error"`
	StartedMS  int64      `db:"started_ms"`
	FinishedMS int64      `db:"finished_ms"`
	CreatedMS  int64      `db:"created_ms"`
	UpdatedMS  int64      `db:"updated_ms"`
}

// TimerImage is a timer as a batch task saw it, stored as JSON; Valid is false when nothing
// was recorded (NULL).
type TimerImage struct {
	Timer Timer
	Valid bool
}

// Image returns a valid image of t.
func Image(t Timer) TimerImage { return TimerImage{Timer: t, Valid: true} }

// timerJSON is the stored form of an image: every field of the timer, named for humans.
type timerJSON struct {
	ID          int64         `json:"id"`
	App         string        `json:"app"`
	Name        string        `json:"name"`
	Status      string        `json:"status"`
	Schedule    schedule.Spec `json:"schedule"`
	AnchorMS    int64         `json:"anchor_ms"`
	Callback    callbackJSON  `json:"callback"`
	Retry       retryJSON     `json:"retry"`
	Misfire     string        `json:"misfire,omitempty"`
	RequestID   string        `json:"request_id,omitempty"`
	RequestHash string        `json:"request_hash,omitempty"`
	Version     int64         `json:"version"`
	CreatedMS   int64         `json:"created_ms"`
	UpdatedMS   int64         `json:"updated_ms"`
}

func (i *TimerImage) Scan(src any) error {
	*i = TimerImage{}
	switch v := src.(type) {
	case nil:
		return nil
	case []byte:
		if len(v) == 0 {
			return nil
		}
	case string:
		if v == "" {
			return nil
		}
	}
	var j timerJSON
	if err := scanJSON(src, &j); err != nil {
		return err
	}
	i.Timer = Timer{
		ID: j.ID, App: j.App, Name: j.Name, Status: j.Status, Schedule: JSONSpec(j.Schedule),
		AnchorMS: j.AnchorMS, Callback: Callback(j.Callback), Retry: RetryPolicy(j.Retry), Misfire: j.Misfire,
		RequestID: j.RequestID, RequestHash: j.RequestHash, Version: j.Version,
		CreatedMS: j.CreatedMS, UpdatedMS: j.UpdatedMS,
	}
	i.Valid = true
	return nil
}

func (i TimerImage) Value() (driver.Value, error) {
	if !i.Valid {
		return nil, nil
	}
	t := i.Timer
	return valueJSON(timerJSON{
		ID: t.ID, App: t.App, Name: t.Name, Status: t.Status, Schedule: schedule.Spec(t.Schedule),
		AnchorMS: t.AnchorMS, Callback: callbackJSON(t.Callback), Retry: retryJSON(t.Retry), Misfire: t.Misfire,
		RequestID: t.RequestID, RequestHash: t.RequestHash, Version: t.Version,
		CreatedMS: t.CreatedMS, UpdatedMS: t.UpdatedMS,
	})
}

// TimerContentEqual reports whether a and b define the same timer: name, status, schedule,
// anchor, callback, retry and misfire policy. Identity, version and times are not compared
// (a rollback restores the content; the version only moves forward).
func TimerContentEqual(a, b Timer) bool {
	if a.Name != b.Name || a.Status != b.Status || a.Schedule != b.Schedule || a.AnchorMS != b.AnchorMS ||
		a.Retry != b.Retry || a.Misfire != b.Misfire {
		return false
	}
	ca, cb := a.Callback, b.Callback
	if ca.URL != cb.URL || ca.Method != cb.Method || ca.Body != cb.Body || ca.TimeoutMS != cb.TimeoutMS {
		return false
	}
	// nil and empty headers are the same callback.
	return len(ca.Headers) == len(cb.Headers) && (len(ca.Headers) == 0 || maps.Equal(ca.Headers, cb.Headers))
}

const batchJobCols = `id, app, operation, status, target, params, COALESCE(request_id, '') AS request_id,
	request_hash, total, version, created_ms, updated_ms, started_ms, finished_ms, rollback_started_ms,
	rollback_finished_ms`

const batchTaskCols = `id, batch_id, timer_id, status, retry, version, owner, deadline_ms, before_image,
	after_image, error, started_ms, finished_ms, created_ms, updated_ms`

// MaxBatchErrorLen bounds batch_task.error (characters); longer errors are cut.
const MaxBatchErrorLen = 1024

// batchInsertChunk bounds the rows of one multi-row INSERT of tasks.
const batchInsertChunk = 500

// batchWriteAttempts bounds retries of a statement that lost an InnoDB deadlock or a SQLite
// busy wait (claims and cancels lock the same rows in different orders).
const batchWriteAttempts = 5

// unfinished batch statuses: the ones the scanner maintains and dispatches.
var activeBatchStatuses = []string{BatchPending, BatchRunning, BatchRollbackRunning}

// CreateBatch inserts j (status pending, version 1, times from nowMS, Total from timerIDs)
// and one pending task per timer id, in one transaction: a batch exists with all its tasks or
// not at all. When j.RequestID is set and a batch has it, that batch is returned with
// existed=true and nothing is inserted; the caller compares RequestHash.
func (s *Store) CreateBatch(ctx context.Context, j BatchJob, timerIDs []int64, nowMS int64) (out BatchJob, existed bool, err error) {
	if len(timerIDs) == 0 {
		return BatchJob{}, false, errors.New("dao: create batch: no timers")
	}
	j.Status = BatchPending
	j.Version = 1
	j.Total = len(timerIDs)
	j.CreatedMS, j.UpdatedMS = nowMS, nowMS
	j.StartedMS, j.FinishedMS, j.RollbackStartedMS, j.RollbackFinishedMS = 0, 0, 0, 0
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO batch_job (app, operation, status, target, params,
		request_id, request_hash, total, version, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			j.App, j.Operation, j.Status, j.Target, j.Params, nullIfEmpty(j.RequestID), j.RequestHash, j.Total,
			j.Version, j.CreatedMS, j.UpdatedMS)
		if err != nil {
			return err
		}
		if j.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		for rest := timerIDs; len(rest) > 0; {
			chunk := rest[:min(len(rest), batchInsertChunk)]
			rest = rest[len(chunk):]
			var q strings.Builder
			q.WriteString("INSERT INTO batch_task (batch_id, timer_id, status, version, created_ms, updated_ms) VALUES ")
			args := make([]any, 0, 6*len(chunk))
			for i, id := range chunk {
				if i > 0 {
					q.WriteString(", ")
				}
				q.WriteString("(?, ?, ?, 1, ?, ?)")
				args = append(args, j.ID, id, TaskPending, nowMS, nowMS)
			}
			if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if _, dup := uniqueViolation(err); dup && j.RequestID != "" {
			// The batch that won the key is committed (the unique check waited for it).
			var prev BatchJob
			gerr := s.db.GetContext(ctx, &prev, "SELECT "+batchJobCols+" FROM batch_job WHERE request_id = ?", j.RequestID)
			if gerr == nil {
				return prev, true, nil
			}
			if !errors.Is(gerr, sql.ErrNoRows) {
				return BatchJob{}, false, fmt.Errorf("dao: create batch: read by request id: %w", gerr)
			}
		}
		return BatchJob{}, false, fmt.Errorf("dao: create batch: %w", err)
	}
	return j, false, nil
}

// BatchByRequestID returns the batch created with requestID; ErrNotFound when none.
func (s *Store) BatchByRequestID(ctx context.Context, requestID string) (BatchJob, error) {
	return getRow[BatchJob](ctx, s.db, "get batch by request id",
		"SELECT "+batchJobCols+" FROM batch_job WHERE request_id = ?", requestID)
}

// GetBatch returns one batch; ErrNotFound when absent.
func (s *Store) GetBatch(ctx context.Context, id int64) (BatchJob, error) {
	return getBatch(ctx, s.db, id)
}

func getBatch(ctx context.Context, q queryer, id int64) (BatchJob, error) {
	return getRow[BatchJob](ctx, q, "get batch", "SELECT "+batchJobCols+" FROM batch_job WHERE id = ?", id)
}

// ListBatchesParams filters a page of batches ordered by id ascending.
type ListBatchesParams struct {
	App     string // optional
	Status  string // optional
	AfterID int64  // cursor: ids greater than this
	Limit   int    // <= 0 means DefaultLimit
}

// ListBatches returns a page of batches.
func (s *Store) ListBatches(ctx context.Context, p ListBatchesParams) ([]BatchJob, error) {
	q := "SELECT " + batchJobCols + " FROM batch_job WHERE id > ?"
	args := []any{p.AfterID}
	if p.App != "" {
		q += " AND app = ?"
		args = append(args, p.App)
	}
	if p.Status != "" {
		q += " AND status = ?"
		args = append(args, p.Status)
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, limitOrDefault(p.Limit))
	js := []BatchJob{}
	if err := s.db.SelectContext(ctx, &js, q, args...); err != nil {
		return nil, fmt.Errorf("dao: list batches: %w", err)
	}
	return js, nil
}

// ListUnfinishedBatches returns up to limit batches that still need maintenance, oldest
// first: pending, running or rolling back, and canceled ones whose running tasks have not all
// finished.
func (s *Store) ListUnfinishedBatches(ctx context.Context, limit int) ([]BatchJob, error) {
	q, args, err := sqlx.In("SELECT "+batchJobCols+` FROM batch_job
	WHERE status IN (?) OR (status = ? AND finished_ms = 0) ORDER BY id LIMIT ?`,
		activeBatchStatuses, BatchCancel, limitOrDefault(limit))
	if err != nil {
		return nil, fmt.Errorf("dao: list unfinished batches: %w", err)
	}
	js := []BatchJob{}
	if err := s.db.SelectContext(ctx, &js, q, args...); err != nil {
		return nil, fmt.Errorf("dao: list unfinished batches: %w", err)
	}
	return js, nil
}

// CountBatchTasks counts a batch's tasks by status (from the index alone); statuses without
// tasks are absent.
func (s *Store) CountBatchTasks(ctx context.Context, batchID int64) (map[string]int, error) {
	var rows []struct {
		Status string `db:"status"`
		N      int    `db:"n"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT status, COUNT(*) AS n FROM batch_task WHERE batch_id = ?
	GROUP BY status`, batchID); err != nil {
		return nil, fmt.Errorf("dao: count tasks of batch %d: %w", batchID, err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.Status] = r.N
	}
	return out, nil
}

// BatchTaskTimes returns the earliest start and the latest finish among a batch's tasks with
// one of statuses (0 when none).
func (s *Store) BatchTaskTimes(ctx context.Context, batchID int64, statuses ...string) (minStartedMS, maxFinishedMS int64, err error) {
	q, args, err := sqlx.In(`SELECT COALESCE(MIN(CASE WHEN started_ms > 0 THEN started_ms END), 0) AS min_started,
	COALESCE(MAX(finished_ms), 0) AS max_finished FROM batch_task WHERE batch_id = ? AND status IN (?)`, batchID, statuses)
	if err != nil {
		return 0, 0, fmt.Errorf("dao: times of batch %d: %w", batchID, err)
	}
	var row struct {
		MinStarted  int64 `db:"min_started"`
		MaxFinished int64 `db:"max_finished"`
	}
	if err := s.db.GetContext(ctx, &row, q, args...); err != nil {
		return 0, 0, fmt.Errorf("dao: times of batch %d: %w", batchID, err)
	}
	return row.MinStarted, row.MaxFinished, nil
}

// BatchStatusParams is an aggregated status to write.
type BatchStatusParams struct {
	ID            int64
	ExpectVersion int64
	Status        string
	// Times to write; see BatchJob.
	StartedMS, FinishedMS, RollbackFinishedMS int64
	NowMS                                     int64
}

// SetBatchStatus writes a batch's status and times where it still has ExpectVersion and
// returns the row as written; ErrVersionConflict when it moved, ErrNotFound when absent.
func (s *Store) SetBatchStatus(ctx context.Context, p BatchStatusParams) (BatchJob, error) {
	var out BatchJob
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE batch_job SET status = ?, started_ms = ?, finished_ms = ?,
		rollback_finished_ms = ?, version = version + 1, updated_ms = ? WHERE id = ? AND version = ?`,
			p.Status, p.StartedMS, p.FinishedMS, p.RollbackFinishedMS, p.NowMS, p.ID, p.ExpectVersion)
		if err != nil {
			return err
		}
		out, err = readBackVersioned(res, func() (BatchJob, error) { return getBatch(ctx, tx, p.ID) })
		return err
	})
	if err != nil {
		if isSentinel(err) {
			return BatchJob{}, err
		}
		return BatchJob{}, fmt.Errorf("dao: set status of batch %d: %w", p.ID, err)
	}
	return out, nil
}

// CancelBatch moves a pending or running batch to cancel and its pending tasks to cancel, in
// one transaction; running tasks finish. It returns the batch as written and how many tasks
// it canceled. ErrBatchState (with the batch as it is) for any other status.
func (s *Store) CancelBatch(ctx context.Context, id, nowMS int64) (BatchJob, int, error) {
	var (
		out BatchJob
		n   int64
	)
	err := s.retryWrite(ctx, func() error {
		return s.inTx(ctx, func(tx *sqlx.Tx) error {
			j, err := getBatch(ctx, tx, id)
			if err != nil {
				return err
			}
			if j.Status != BatchPending && j.Status != BatchRunning {
				out = j
				return ErrBatchState
			}
			// Batch first: claims check its status, so from here on no task starts.
			if err := casBatch(ctx, tx, id, j.Version, `status = ?, version = version + 1, updated_ms = ?`,
				BatchCancel, nowMS); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `UPDATE batch_task SET status = ?, version = version + 1,
			finished_ms = ?, updated_ms = ? WHERE batch_id = ? AND status = ?`, TaskCancel, nowMS, nowMS, id, TaskPending)
			if err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil {
				return err
			}
			out, err = getBatch(ctx, tx, id)
			return err
		})
	})
	if err != nil {
		if errors.Is(err, ErrBatchState) || isSentinel(err) {
			return out, 0, err
		}
		return BatchJob{}, 0, fmt.Errorf("dao: cancel batch %d: %w", id, err)
	}
	return out, int(n), nil
}

// RollbackFrom lists the batch statuses a rollback may start from: every finished forward
// status, and rollback_fail to retry the rollbacks that failed.
var RollbackFrom = []string{BatchSuccess, BatchFail, BatchPartialFail, BatchCancel, BatchRollbackFail}

// StartBatchRollback moves a finished batch to rollback_running and every task that recorded
// a before-image (success, fail or rollback_fail) to rollback_pending with its retries reset,
// in one transaction. It returns the batch as written and how many tasks will roll back.
// ErrBatchState (with the batch as it is) when the batch is not in a RollbackFrom status, or
// is canceled but still has running tasks.
func (s *Store) StartBatchRollback(ctx context.Context, id, nowMS int64) (BatchJob, int, error) {
	var (
		out BatchJob
		n   int64
	)
	err := s.retryWrite(ctx, func() error {
		return s.inTx(ctx, func(tx *sqlx.Tx) error {
			j, err := getBatch(ctx, tx, id)
			if err != nil {
				return err
			}
			if !slices.Contains(RollbackFrom, j.Status) || (j.Status == BatchCancel && j.FinishedMS == 0) {
				out = j
				return ErrBatchState
			}
			if err := casBatch(ctx, tx, id, j.Version, `status = ?, rollback_started_ms = ?, rollback_finished_ms = 0,
			version = version + 1, updated_ms = ?`, BatchRollbackRunning, nowMS, nowMS); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `UPDATE batch_task SET status = ?, retry = 0, error = '',
			version = version + 1, updated_ms = ? WHERE batch_id = ? AND status IN (?, ?, ?) AND before_image IS NOT NULL`,
				TaskRollbackPending, nowMS, id, TaskSuccess, TaskFail, TaskRollbackFail)
			if err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil {
				return err
			}
			out, err = getBatch(ctx, tx, id)
			return err
		})
	})
	if err != nil {
		if errors.Is(err, ErrBatchState) || isSentinel(err) {
			return out, 0, err
		}
		return BatchJob{}, 0, fmt.Errorf("dao: roll back batch %d: %w", id, err)
	}
	return out, int(n), nil
}

// CancelPendingBatchTasks cancels the pending tasks of a batch (those a retry or a take-back
// returned to pending after the batch was canceled). It returns how many.
func (s *Store) CancelPendingBatchTasks(ctx context.Context, batchID, nowMS int64) (int, error) {
	var n int64
	err := s.retryWrite(ctx, func() error {
		res, err := s.db.ExecContext(ctx, `UPDATE batch_task SET status = ?, version = version + 1,
		finished_ms = ?, updated_ms = ? WHERE batch_id = ? AND status = ?`, TaskCancel, nowMS, nowMS, batchID, TaskPending)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("dao: cancel pending tasks of batch %d: %w", batchID, err)
	}
	return int(n), nil
}

// ListBatchTasksParams filters a page of a batch's tasks ordered by id ascending.
type ListBatchTasksParams struct {
	BatchID  int64
	Status   string // optional
	AfterID  int64
	BeforeID int64 // optional: ids less than this when > 0
	Limit    int   // <= 0 means DefaultLimit
}

// ListBatchTasks returns a page of a batch's tasks.
func (s *Store) ListBatchTasks(ctx context.Context, p ListBatchTasksParams) ([]BatchTask, error) {
	q := "SELECT " + batchTaskCols + " FROM batch_task WHERE batch_id = ? AND id > ?"
	args := []any{p.BatchID, p.AfterID}
	if p.Status != "" {
		q += " AND status = ?"
		args = append(args, p.Status)
	}
	if p.BeforeID > 0 {
		q += " AND id < ?"
		args = append(args, p.BeforeID)
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, limitOrDefault(p.Limit))
	ts := []BatchTask{}
	if err := s.db.SelectContext(ctx, &ts, q, args...); err != nil {
		return nil, fmt.Errorf("dao: list tasks of batch %d: %w", p.BatchID, err)
	}
	return ts, nil
}

// GetBatchTask returns one task; ErrNotFound when absent.
func (s *Store) GetBatchTask(ctx context.Context, id int64) (BatchTask, error) {
	return getRow[BatchTask](ctx, s.db, "get batch task", "SELECT "+batchTaskCols+" FROM batch_task WHERE id = ?", id)
}

// ClaimBatchTaskParams is a claim: the task moves From -> To if it still has Version and
// From, and its batch is in one of BatchStatuses.
type ClaimBatchTaskParams struct {
	ID, Version   int64
	From, To      string
	BatchStatuses []string
	Owner         string
	NowMS         int64
	// DeadlineMS: when the claim may be taken back if not released.
	DeadlineMS int64
}

// ClaimBatchTask claims a task by compare-and-set; the claimed task has version Version+1,
// status To, the owner, deadline and start time of p, and no error. claimed=false when
// another runner took it, its version or status moved, or its batch is no longer in
// BatchStatuses (canceled).
//
// The batch check is part of the one UPDATE, so a claim and a cancel are ordered by the
// database: a task claimed before the cancel commits runs to its end, none starts after.
func (s *Store) ClaimBatchTask(ctx context.Context, p ClaimBatchTaskParams) (claimed bool, err error) {
	q, args, err := sqlx.In(`UPDATE batch_task SET status = ?, version = version + 1, owner = ?, deadline_ms = ?,
	started_ms = ?, finished_ms = 0, error = '', updated_ms = ?
	WHERE id = ? AND version = ? AND status = ?
	AND batch_id IN (SELECT id FROM batch_job WHERE status IN (?))`,
		p.To, truncate(p.Owner, MaxOwnerLen), p.DeadlineMS, p.NowMS, p.NowMS, p.ID, p.Version, p.From, p.BatchStatuses)
	if err != nil {
		return false, fmt.Errorf("dao: claim batch task %d: %w", p.ID, err)
	}
	var n int64
	err = s.retryWrite(ctx, func() error {
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("dao: claim batch task %d: %w", p.ID, err)
	}
	return n == 1, nil
}

// JournalBatchTask records a running task's before and after images (what it is about to
// change the timer from and to) where the task still has version, and returns the new
// version. ErrVersionConflict means the task was taken back: the caller must not change the
// timer.
func (s *Store) JournalBatchTask(ctx context.Context, id, version int64, before, after Timer, nowMS int64) (int64, error) {
	var n int64
	err := s.retryWrite(ctx, func() error {
		res, err := s.db.ExecContext(ctx, `UPDATE batch_task SET before_image = ?, after_image = ?, version = version + 1,
		updated_ms = ? WHERE id = ? AND version = ?`, Image(before), Image(after), nowMS, id, version)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("dao: journal batch task %d: %w", id, err)
	}
	if n == 0 {
		return 0, ErrVersionConflict
	}
	return version + 1, nil
}

// ReleaseBatchTaskParams is the outcome of a claimed task.
type ReleaseBatchTaskParams struct {
	ID, Version int64
	Status      string
	Retry       int
	Error       string // cut to MaxBatchErrorLen characters
	// Before and After replace the recorded images when non-nil.
	Before, After *Timer
	NowMS         int64
}

// ReleaseBatchTask writes a claimed task's outcome where it still has Version;
// ErrVersionConflict when it was taken back meanwhile (the outcome is then dropped).
func (s *Store) ReleaseBatchTask(ctx context.Context, p ReleaseBatchTaskParams) error {
	var before, after any
	if p.Before != nil {
		before = Image(*p.Before)
	}
	if p.After != nil {
		after = Image(*p.After)
	}
	var n int64
	err := s.retryWrite(ctx, func() error {
		res, err := s.db.ExecContext(ctx, `UPDATE batch_task SET status = ?, retry = ?, error = ?,
		before_image = COALESCE(?, before_image), after_image = COALESCE(?, after_image),
		deadline_ms = 0, finished_ms = ?, version = version + 1, updated_ms = ? WHERE id = ? AND version = ?`,
			p.Status, p.Retry, truncate(p.Error, MaxBatchErrorLen), before, after, p.NowMS, p.NowMS, p.ID, p.Version)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("dao: release batch task %d: %w", p.ID, err)
	}
	if n == 0 {
		return ErrVersionConflict
	}
	return nil
}

// TakeBackParams selects running tasks of a batch whose runner is presumed gone.
type TakeBackParams struct {
	BatchID int64
	// NowMS: tasks whose deadline is before it are taken back.
	NowMS int64
	// Owner, when set, takes back the running tasks of that instance whatever their
	// deadline: a restarted instance knows its previous life's claims are dead.
	Owner string
	// MaxRetries: a task with this many retries fails instead of going back to pending.
	MaxRetries int
	Limit      int // <= 0 means DefaultLimit
}

// TakeBackBatchTasks returns a batch's running tasks whose runner is gone to pending
// (rollback_running to rollback_pending) with one more retry, or fails them when out of
// retries, each by compare-and-set. It returns how many it took back.
func (s *Store) TakeBackBatchTasks(ctx context.Context, p TakeBackParams) (int, error) {
	q := "SELECT id, status, retry, version FROM batch_task WHERE batch_id = ? AND status IN (?, ?) AND "
	args := []any{p.BatchID, TaskRunning, TaskRollbackRunning}
	if p.Owner != "" {
		q += "owner = ?"
		args = append(args, truncate(p.Owner, MaxOwnerLen))
	} else {
		q += "deadline_ms < ?"
		args = append(args, p.NowMS)
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, limitOrDefault(p.Limit))
	var rows []struct {
		ID      int64  `db:"id"`
		Status  string `db:"status"`
		Retry   int    `db:"retry"`
		Version int64  `db:"version"`
	}
	if err := s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return 0, fmt.Errorf("dao: find tasks of batch %d to take back: %w", p.BatchID, err)
	}
	taken := 0
	for _, r := range rows {
		status, retry, msg := TaskPending, r.Retry+1, "taken back: its runner stopped or timed out"
		if r.Status == TaskRollbackRunning {
			status = TaskRollbackPending
		}
		if r.Retry >= p.MaxRetries {
			status, retry = TaskFail, r.Retry
			if r.Status == TaskRollbackRunning {
				status = TaskRollbackFail
			}
			msg = fmt.Sprintf("its runner stopped or timed out after %d retries", r.Retry)
		}
		err := s.ReleaseBatchTask(ctx, ReleaseBatchTaskParams{
			ID: r.ID, Version: r.Version, Status: status, Retry: retry, Error: msg, NowMS: p.NowMS,
		})
		if errors.Is(err, ErrVersionConflict) {
			continue // released or taken back by someone else meanwhile
		}
		if err != nil {
			return taken, err
		}
		taken++
	}
	return taken, nil
}

// GetTimerAny returns a timer whatever its status, deleted included; ErrNotFound when absent.
func (s *Store) GetTimerAny(ctx context.Context, id int64) (Timer, error) {
	return getTimerAny(ctx, s.db, id)
}

func getTimerAny(ctx context.Context, q queryer, id int64) (Timer, error) {
	return getRow[Timer](ctx, q, "get timer", "SELECT "+timerCols+" FROM timer WHERE id = ?", id)
}

// RestoreTimer writes the content of img (name, status, schedule, anchor, callback, retry,
// misfire) back to timer img.ID where it still has expectVersion, deleted or not; it bumps version and
// updated_ms and returns the row as written. img.Status must not be deleted.
// ErrVersionConflict when the version moved, ErrNotFound when absent, ErrNameTaken when
// another live timer of the app took the name meanwhile.
func (s *Store) RestoreTimer(ctx context.Context, img Timer, expectVersion, nowMS int64) (Timer, error) {
	if img.Status == "" || img.Status == StatusDeleted {
		return Timer{}, fmt.Errorf("dao: restore timer %d: status %q", img.ID, img.Status)
	}
	var out Timer
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE timer SET name = ?, live_name = ?, status = ?, schedule = ?,
		anchor_ms = ?, callback = ?, retry = ?, misfire = ?, version = version + 1, updated_ms = ? WHERE id = ? AND version = ?`,
			img.Name, liveName(img.Status, img.Name), img.Status, img.Schedule, img.AnchorMS, img.Callback, img.Retry,
			img.Misfire, nowMS, img.ID, expectVersion)
		if err != nil {
			if isNameTaken(err) {
				return ErrNameTaken
			}
			return err
		}
		out, err = readBackVersioned(res, func() (Timer, error) { return getTimerAny(ctx, tx, img.ID) })
		return err
	})
	if err != nil {
		if isSentinel(err) {
			return Timer{}, err
		}
		return Timer{}, fmt.Errorf("dao: restore timer %d: %w", img.ID, err)
	}
	return out, nil
}

// TimerSelector chooses live timers: App is required, Status and NamePrefix optional.
type TimerSelector struct {
	App        string
	Status     string
	NamePrefix string
}

// SelectTimerIDs returns up to limit ids of the non-deleted timers sel matches, ascending.
// The prefix compares characters exactly (case-sensitive on both backends, unlike LIKE on
// SQLite).
func (s *Store) SelectTimerIDs(ctx context.Context, sel TimerSelector, limit int) ([]int64, error) {
	if sel.Status == StatusDeleted {
		return []int64{}, nil
	}
	q := "SELECT id FROM timer WHERE app = ? AND status <> ?"
	args := []any{sel.App, StatusDeleted}
	if sel.Status != "" {
		q += " AND status = ?"
		args = append(args, sel.Status)
	}
	if sel.NamePrefix != "" {
		q += " AND SUBSTR(name, 1, ?) = ?"
		args = append(args, utf8.RuneCountInString(sel.NamePrefix), sel.NamePrefix)
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, limitOrDefault(limit))
	ids := []int64{}
	if err := s.db.SelectContext(ctx, &ids, q, args...); err != nil {
		return nil, fmt.Errorf("dao: select timers of app %s: %w", sel.App, err)
	}
	return ids, nil
}

// errBatchMoved: the batch changed between the read and the write of a transaction (the read
// is a snapshot, not a lock); the transaction is run again.
var errBatchMoved = errors.New("dao: batch changed concurrently")

// casBatch updates batch id with set (and args) where it still has version.
func casBatch(ctx context.Context, tx *sqlx.Tx, id, version int64, set string, args ...any) error {
	res, err := tx.ExecContext(ctx, "UPDATE batch_job SET "+set+" WHERE id = ? AND version = ?", append(args, id, version)...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return errBatchMoved
	}
	return nil
}

// retryWrite runs fn again when it lost an InnoDB deadlock or lock wait, or SQLite stayed
// busy, a few times.
func (s *Store) retryWrite(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !(isRetryable(err) || errors.Is(err, errBatchMoved)) || attempt == batchWriteAttempts || ctx.Err() != nil {
			return err
		}
	}
}
