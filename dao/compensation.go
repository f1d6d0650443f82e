package dao

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// Misfire policies: what becomes of a timer's occurrences found missed (no execution) after
// their time, e.g. while every instance was down. Within the catch-up window:
const (
	// MisfireFireAll fires every missed occurrence once, late (the default).
	MisfireFireAll = "fire_all"
	// MisfireFireOnce fires only the latest missed occurrence; the others are recorded missed.
	MisfireFireOnce = "fire_once"
	// MisfireSkip fires none; they are recorded missed.
	MisfireSkip = "skip"
)

// MisfireOrDefault maps "" (rows and requests from before the policy existed) to
// MisfireFireAll.
func MisfireOrDefault(m string) string {
	if m == "" {
		return MisfireFireAll
	}
	return m
}

// ValidMisfire reports whether m names a policy ("" is not one).
func ValidMisfire(m string) bool {
	return m == MisfireFireAll || m == MisfireFireOnce || m == MisfireSkip
}

// SliceDone is one row of slice_done: a (minute, bucket) slice whose trigger ran to the end,
// so every occurrence the index held for it has an execution.
type SliceDone struct {
	SliceStartMS int64  `db:"slice_start_ms"`
	Bucket       int    `db:"bucket"`
	CompletedMS  int64  `db:"completed_ms"`
	Instance     string `db:"instance"`
}

// MarkSliceDone records a completed slice; recording it again keeps the first record.
func (s *Store) MarkSliceDone(ctx context.Context, d SliceDone) error {
	q := `INSERT INTO slice_done (slice_start_ms, bucket, completed_ms, instance) VALUES (?, ?, ?, ?)`
	if s.dialect == DialectMySQL {
		q += " ON DUPLICATE KEY UPDATE slice_done.completed_ms = slice_done.completed_ms"
	} else {
		q += " ON CONFLICT (slice_start_ms, bucket) DO NOTHING"
	}
	if _, err := s.db.ExecContext(ctx, q, d.SliceStartMS, d.Bucket, d.CompletedMS, truncate(d.Instance, MaxOwnerLen)); err != nil {
		return fmt.Errorf("dao: mark slice %d/%d done: %w", d.SliceStartMS, d.Bucket, err)
	}
	return nil
}

// ListSlicesDone returns the completed slices starting in [fromMS, toMS), by start and bucket.
// At most buckets rows per minute, so the window of a compensation pass is a small read.
func (s *Store) ListSlicesDone(ctx context.Context, fromMS, toMS int64) ([]SliceDone, error) {
	out := []SliceDone{}
	err := s.db.SelectContext(ctx, &out, `SELECT slice_start_ms, bucket, completed_ms, instance FROM slice_done
	WHERE slice_start_ms >= ? AND slice_start_ms < ? ORDER BY slice_start_ms, bucket`, fromMS, toMS)
	if err != nil {
		return nil, fmt.Errorf("dao: list slices done: %w", err)
	}
	return out, nil
}

// SliceDoneBounds returns the starts of the earliest and the latest completed slices on
// record; ok=false when none is. The earliest is where the compensation loop's knowledge
// begins: slices before it are never scanned.
func (s *Store) SliceDoneBounds(ctx context.Context) (firstMS, lastMS int64, ok bool, err error) {
	var v struct {
		First sql.NullInt64 `db:"first"`
		Last  sql.NullInt64 `db:"last"`
	}
	if err := s.db.GetContext(ctx, &v, `SELECT MIN(slice_start_ms) AS first, MAX(slice_start_ms) AS last FROM slice_done`); err != nil {
		return 0, 0, false, fmt.Errorf("dao: slice done bounds: %w", err)
	}
	return v.First.Int64, v.Last.Int64, v.Last.Valid, nil
}

// PruneSlicesDone deletes the records of slices starting before beforeMS (older than any
// window the compensation loop looks at) and returns how many it deleted.
func (s *Store) PruneSlicesDone(ctx context.Context, beforeMS int64) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM slice_done WHERE slice_start_ms < ?`, beforeMS)
	if err != nil {
		return 0, fmt.Errorf("dao: prune slices done: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("dao: prune slices done: %w", err)
	}
	return n, nil
}

// ListStuckExecutions returns up to limit executions that should have moved on before
// beforeMS and did not: running ones not renewed (updated_ms, which heartbeats move) since
// then, and pending ones whose retry was due (next_retry_ms) before then. Oldest first; both
// halves use an index on (status, ...).
func (s *Store) ListStuckExecutions(ctx context.Context, beforeMS int64, limit int) ([]Execution, error) {
	out := []Execution{}
	err := s.db.SelectContext(ctx, &out, "SELECT "+execCols+` FROM timer_task
	WHERE (status = ? AND updated_ms < ?) OR (status = ? AND next_retry_ms < ?)
	ORDER BY updated_ms, id LIMIT ?`,
		ExecRunning, beforeMS, ExecPending, beforeMS, limitOrDefault(limit))
	if err != nil {
		return nil, fmt.Errorf("dao: list stuck executions: %w", err)
	}
	return out, nil
}

// Occurrence names one (timer, scheduled time).
type Occurrence struct {
	TimerID     int64 `db:"timer_id"`
	ScheduledMS int64 `db:"scheduled_ms"`
}

// ExistingOccurrences returns the occurrences of timerIDs scheduled in [fromMS, toMS) that
// have an execution row, whatever its status. It reads the (timer_id, scheduled_ms) unique
// index only, in chunks of timer ids.
func (s *Store) ExistingOccurrences(ctx context.Context, timerIDs []int64, fromMS, toMS int64) ([]Occurrence, error) {
	out := []Occurrence{}
	for len(timerIDs) > 0 {
		chunk := timerIDs[:min(len(timerIDs), getTimersChunk)]
		timerIDs = timerIDs[len(chunk):]
		q, args, err := sqlx.In(`SELECT timer_id, scheduled_ms FROM timer_task
		WHERE timer_id IN (?) AND scheduled_ms >= ? AND scheduled_ms < ?`, chunk, fromMS, toMS)
		if err != nil {
			return nil, fmt.Errorf("dao: existing occurrences: %w", err)
		}
		var part []Occurrence
		if err := s.db.SelectContext(ctx, &part, q, args...); err != nil {
			return nil, fmt.Errorf("dao: existing occurrences: %w", err)
		}
		out = append(out, part...)
	}
	return out, nil
}

// MissedParams records an occurrence that will not fire.
type MissedParams struct {
	TimerID      int64
	ScheduledMS  int64
	TimerVersion int64
	Owner        string // the instance that decided it
	Reason       string // kept in the error column, cut to MaxErrorLen
	NowMS        int64
}

// RecordMissed inserts the occurrence's execution row with status missed (attempt 0) unless
// it has one already; recorded=false then. Like a claim, the row keeps the occurrence from
// ever firing afterwards.
func (s *Store) RecordMissed(ctx context.Context, p MissedParams) (recorded bool, err error) {
	q := `INSERT INTO timer_task (timer_id, scheduled_ms, status, attempt, owner, timer_version,
		started_ms, finished_ms, duration_ms, http_status, error, response, created_ms, updated_ms)
	VALUES (?, ?, ?, 0, ?, ?, 0, ?, 0, 0, ?, '', ?, ?)` + s.ignoreDuplicateClause("timer_task", "timer_id, scheduled_ms")
	res, err := s.db.ExecContext(ctx, q, p.TimerID, p.ScheduledMS, ExecMissed, truncate(p.Owner, MaxOwnerLen),
		p.TimerVersion, p.NowMS, truncate(p.Reason, MaxErrorLen), p.NowMS, p.NowMS)
	if err != nil {
		return false, fmt.Errorf("dao: record missed %s: %w", Key(p.TimerID, p.ScheduledMS), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("dao: record missed %s: %w", Key(p.TimerID, p.ScheduledMS), err)
	}
	return n == 1, nil
}
