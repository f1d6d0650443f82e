package dao

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// timerCols selects a Timer. request_id is NULL when not given (so UNIQUE ignores it) and
// reads back as "".
const timerCols = `id, app, name, status, schedule, anchor_ms, callback, retry, misfire,
	COALESCE(request_id, '') AS request_id, request_hash, version, created_ms, updated_ms`

// DefaultLimit is the page size when a List call passes Limit <= 0.
const DefaultLimit = 100

// liveName is what the unique (app, live_name) key sees: the name, or NULL once deleted.
func liveName(status, name string) any {
	if status == StatusDeleted {
		return nil
	}
	return name
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// CreateTimer inserts t (ID, Version=1 and times are filled in from NowMS; an empty Status
// means enabled). When t.RequestID is set and (app, request_id) exists, it returns the
// existing timer and existed=true without inserting; that timer may since have been changed
// or deleted (Status tells), and the caller compares RequestHash. ErrNameTaken when a
// non-deleted timer of the app has the name.
func (s *Store) CreateTimer(ctx context.Context, t Timer, nowMS int64) (out Timer, existed bool, err error) {
	if t.Status == "" {
		t.Status = StatusEnabled
	}
	t.Version = 1
	t.Misfire = MisfireOrDefault(t.Misfire)
	t.CreatedMS, t.UpdatedMS = nowMS, nowMS
	res, err := s.db.ExecContext(ctx, `INSERT INTO timer
	(app, name, live_name, status, schedule, anchor_ms, callback, retry, misfire, request_id, request_hash, version, created_ms, updated_ms)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.App, t.Name, liveName(t.Status, t.Name), t.Status, t.Schedule, t.AnchorMS, t.Callback, t.Retry, MisfireOrDefault(t.Misfire),
		nullIfEmpty(t.RequestID), t.RequestHash, t.Version, t.CreatedMS, t.UpdatedMS)
	if err != nil {
		if _, dup := uniqueViolation(err); dup && t.RequestID != "" {
			// Whichever key MySQL reports first, a replayed request also repeats the name:
			// look for the request id before calling it a name conflict. The row that beat
			// us is committed (the unique check waited for it), so the read finds it.
			prev, gerr := s.timerByRequestID(ctx, t.App, t.RequestID)
			if gerr == nil {
				return prev, true, nil
			}
			if !errors.Is(gerr, ErrNotFound) {
				return Timer{}, false, gerr
			}
		}
		if isNameTaken(err) {
			return Timer{}, false, ErrNameTaken
		}
		return Timer{}, false, fmt.Errorf("dao: create timer: %w", err)
	}
	if t.ID, err = res.LastInsertId(); err != nil {
		return Timer{}, false, fmt.Errorf("dao: create timer: last insert id: %w", err)
	}
	return t, false, nil
}

func (s *Store) timerByRequestID(ctx context.Context, app, requestID string) (Timer, error) {
	return getRow[Timer](ctx, s.db, "get timer by request id",
		"SELECT "+timerCols+" FROM timer WHERE app = ? AND request_id = ?", app, requestID)
}

// GetTimer returns a non-deleted timer; ErrNotFound otherwise.
func (s *Store) GetTimer(ctx context.Context, id int64) (Timer, error) {
	return getTimer(ctx, s.db, id)
}

func getTimer(ctx context.Context, q queryer, id int64) (Timer, error) {
	return getRow[Timer](ctx, q, "get timer",
		"SELECT "+timerCols+" FROM timer WHERE id = ? AND status <> ?", id, StatusDeleted)
}

// getTimersChunk bounds the IN list of one query.
const getTimersChunk = 500

// GetTimers returns the non-deleted timers among ids, keyed by id (missing ids are absent).
func (s *Store) GetTimers(ctx context.Context, ids []int64) (map[int64]Timer, error) {
	out := make(map[int64]Timer, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), getTimersChunk)]
		ids = ids[len(chunk):]
		q, args, err := sqlx.In("SELECT "+timerCols+" FROM timer WHERE id IN (?) AND status <> ?", chunk, StatusDeleted)
		if err != nil {
			return nil, fmt.Errorf("dao: get timers: %w", err)
		}
		var ts []Timer
		if err := s.db.SelectContext(ctx, &ts, q, args...); err != nil {
			return nil, fmt.Errorf("dao: get timers: %w", err)
		}
		for _, t := range ts {
			out[t.ID] = t
		}
	}
	return out, nil
}

// ListTimersParams filters a page of timers ordered by id ascending.
type ListTimersParams struct {
	App     string // optional
	Status  string // optional; deleted timers are never listed
	AfterID int64  // cursor: ids greater than this
	Limit   int    // <= 0 means DefaultLimit
}

// ListTimers returns a page of non-deleted timers; the next page starts after the last id.
func (s *Store) ListTimers(ctx context.Context, p ListTimersParams) ([]Timer, error) {
	if p.Status == StatusDeleted {
		return []Timer{}, nil
	}
	q := "SELECT " + timerCols + " FROM timer WHERE id > ? AND status <> ?"
	args := []any{p.AfterID, StatusDeleted}
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
	ts := []Timer{}
	if err := s.db.SelectContext(ctx, &ts, q, args...); err != nil {
		return nil, fmt.Errorf("dao: list timers: %w", err)
	}
	return ts, nil
}

// ListEnabledTimers pages through enabled timers by id for the migrator.
func (s *Store) ListEnabledTimers(ctx context.Context, afterID int64, limit int) ([]Timer, error) {
	return s.ListTimers(ctx, ListTimersParams{Status: StatusEnabled, AfterID: afterID, Limit: limit})
}

func limitOrDefault(n int) int {
	if n <= 0 {
		return DefaultLimit
	}
	return n
}

// UpdateTimer writes name, status, schedule, anchor, callback, retry and misfire of t where the row
// still has expectVersion and is not deleted; bumps version and updated_ms and returns the
// row as written. ErrVersionConflict when the version moved, ErrNotFound when gone,
// ErrNameTaken on a duplicate name. App, RequestID, RequestHash and CreatedMS never change.
func (s *Store) UpdateTimer(ctx context.Context, t Timer, expectVersion, nowMS int64) (Timer, error) {
	if t.Status == "" || t.Status == StatusDeleted {
		return Timer{}, fmt.Errorf("dao: update timer %d: status %q (use DeleteTimer to delete)", t.ID, t.Status)
	}
	var out Timer
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE timer SET name = ?, live_name = ?, status = ?, schedule = ?,
		anchor_ms = ?, callback = ?, retry = ?, misfire = ?, version = version + 1, updated_ms = ?
		WHERE id = ? AND version = ? AND status <> ?`,
			t.Name, liveName(t.Status, t.Name), t.Status, t.Schedule, t.AnchorMS, t.Callback, t.Retry, MisfireOrDefault(t.Misfire), nowMS,
			t.ID, expectVersion, StatusDeleted)
		if err != nil {
			if isNameTaken(err) {
				return ErrNameTaken
			}
			return err
		}
		out, err = readBackVersioned(res, func() (Timer, error) { return getTimer(ctx, tx, t.ID) })
		return err
	})
	if err != nil {
		if isSentinel(err) {
			return Timer{}, err
		}
		return Timer{}, fmt.Errorf("dao: update timer %d: %w", t.ID, err)
	}
	return out, nil
}

// DeleteTimer soft-deletes (status deleted, name freed, version+1). ErrNotFound when absent.
func (s *Store) DeleteTimer(ctx context.Context, id, nowMS int64) error {
	res, err := s.db.ExecContext(ctx, `UPDATE timer SET status = ?, live_name = NULL, version = version + 1, updated_ms = ?
	WHERE id = ? AND status <> ?`, StatusDeleted, nowMS, id, StatusDeleted)
	if err != nil {
		return fmt.Errorf("dao: delete timer %d: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("dao: delete timer %d: %w", id, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// CompleteOneShot marks an enabled one-shot ("at") timer completed (version+1) if it is still
// at version, the definition whose occurrence ran; a no-op (nil) for a timer that is gone,
// not enabled, not a one-shot or changed since (a new "at" must still fire).
func (s *Store) CompleteOneShot(ctx context.Context, id, version, nowMS int64) error {
	t, err := s.GetTimer(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dao: complete timer %d: %w", id, err)
	}
	if t.Status != StatusEnabled || t.Schedule.At == "" || t.Version != version {
		return nil
	}
	// The schedule kind is JSON, so it is checked above and pinned here by the version.
	_, err = s.db.ExecContext(ctx, `UPDATE timer SET status = ?, version = version + 1, updated_ms = ?
	WHERE id = ? AND status = ? AND version = ?`, StatusCompleted, nowMS, id, StatusEnabled, t.Version)
	if err != nil {
		return fmt.Errorf("dao: complete timer %d: %w", id, err)
	}
	return nil
}

// readBackVersioned finishes an optimistic update (UPDATE ... WHERE id = ? AND version = ?):
// when it changed no row, the row is gone (get's ErrNotFound) or moved on
// (ErrVersionConflict); otherwise it returns the row as written, read in the same transaction.
func readBackVersioned[T any](res sql.Result, get func() (T, error)) (T, error) {
	var zero T
	n, err := res.RowsAffected()
	if err != nil {
		return zero, err
	}
	row, err := get()
	if err != nil {
		return zero, err
	}
	if n == 0 {
		return zero, ErrVersionConflict
	}
	return row, nil
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func isSentinel(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrNameTaken) || errors.Is(err, ErrVersionConflict)
}
