package dao

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"
)

// Group writes: the executor coalesces the claims, results and one-shot completions of
// occurrences firing at once into one statement each (executor/group.go), so the store
// sees a few statements per group instead of several per occurrence. Each method keeps the
// per-row semantics of its single-row twin.

// MaxGroup bounds the rows of one group statement (placeholders stay far below the MySQL
// and SQLite limits).
const MaxGroup = 200

// ClaimResult is one claim of a group: like ClaimExecution's results.
type ClaimResult struct {
	Existing Execution
	Claimed  bool
}

// ClaimExecutions claims a group of occurrences as ClaimExecution does each, in one INSERT
// ... SELECT joined with the requested (timer, version) pairs and one read back. All must
// share Owner and NowMS. A row counts as claimed by this call when it is running, attempt 1,
// owned by Owner and created at NowMS (the executor runs one claim per occurrence at a
// time, so no earlier claim of the same occurrence by this owner has that same instant
// and is still running).
func (s *Store) ClaimExecutions(ctx context.Context, ps []ClaimParams) ([]ClaimResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	if len(ps) > MaxGroup {
		return nil, fmt.Errorf("dao: claim group of %d (max %d)", len(ps), MaxGroup)
	}
	owner, now := truncate(ps[0].Owner, MaxOwnerLen), ps[0].NowMS
	for _, p := range ps {
		if truncate(p.Owner, MaxOwnerLen) != owner || p.NowMS != now {
			return nil, errors.New("dao: claim group: every claim must share owner and now")
		}
	}
	if s.dialect != DialectMySQL {
		return s.claimEach(ctx, ps)
	}
	var sel strings.Builder
	args := make([]any, 0, 4*len(ps)+8)
	ids := make([]int64, 0, len(ps))
	minMS, maxMS := ps[0].ScheduledMS, ps[0].ScheduledMS
	// In timer id order, so concurrent groups lock timer rows in one order (rows are matched
	// back by key, not position).
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b ClaimParams) int { return cmp.Compare(a.TimerID, b.TimerID) })
	for i, p := range sorted {
		if i > 0 {
			sel.WriteString(" UNION ALL ")
		}
		sel.WriteString("SELECT ? AS tid, ? AS sms, ? AS ver, ? AS st")
		args = append(args, p.TimerID, p.ScheduledMS, p.TimerVersion, claimStartedMS(p))
		ids = append(ids, p.TimerID)
		minMS, maxMS = min(minMS, p.ScheduledMS), max(maxMS, p.ScheduledMS)
	}
	// STRAIGHT_JOIN: drive from the requested rows by primary key. Left to itself MariaDB may
	// scan timer by status, and INSERT ... SELECT would then lock every enabled timer.
	q := `INSERT INTO timer_task (timer_id, scheduled_ms, status, attempt, owner, timer_version,
		started_ms, finished_ms, duration_ms, http_status, error, response, created_ms, updated_ms)
	SELECT t.id, v.sms, ?, 1, ?, t.version, v.st, 0, 0, 0, '', '', ?, ?
	FROM (` + sel.String() + `) v STRAIGHT_JOIN timer t ON t.id = v.tid AND t.version = v.ver
	WHERE t.status = ?` + s.ignoreDuplicateClause("timer_task", "timer_id, scheduled_ms")
	all := append([]any{ExecRunning, owner, now, now}, args...)
	all = append(all, StatusEnabled)
	var err error
	for attempt := 1; ; attempt++ {
		_, err = s.db.ExecContext(ctx, q, all...)
		if err == nil || !isRetryable(err) || attempt == claimAttempts || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("dao: claim group of %d: %w", len(ps), err)
	}
	rq, rargs, err := sqlx.In("SELECT "+execCols+` FROM timer_task WHERE timer_id IN (?)
	AND scheduled_ms >= ? AND scheduled_ms <= ?`, ids, minMS, maxMS)
	if err != nil {
		return nil, fmt.Errorf("dao: claim group: read back: %w", err)
	}
	var rows []Execution
	if err := s.db.SelectContext(ctx, &rows, rq, rargs...); err != nil {
		return nil, fmt.Errorf("dao: claim group of %d: read back: %w", len(ps), err)
	}
	byKey := make(map[[2]int64]Execution, len(rows))
	for _, e := range rows {
		byKey[[2]int64{e.TimerID, e.ScheduledMS}] = e
	}
	out := make([]ClaimResult, len(ps))
	for i, p := range ps {
		e, ok := byKey[[2]int64{p.TimerID, p.ScheduledMS}]
		if !ok {
			continue // the timer is not enabled at that version
		}
		out[i] = ClaimResult{Existing: e, Claimed: e.Status == ExecRunning && e.Attempt == 1 && e.Owner == owner &&
			e.CreatedMS == now && e.TimerVersion == p.TimerVersion}
	}
	return out, nil
}

// claimEach claims a group in one SQLite transaction, one prepared single-row claim per
// occurrence: in-process SQLite has no round trips to save, and a statement whose shape
// changes with the group's size would be parsed anew every time (the cost that dominated).
func (s *Store) claimEach(ctx context.Context, ps []ClaimParams) ([]ClaimResult, error) {
	out := make([]ClaimResult, len(ps))
	err := s.retryTx(ctx, func(tx *sqlx.Tx) error {
		clear(out)
		ins, err := s.prepared(ctx, tx, claimQuery+s.ignoreDuplicateClause("timer_task", "timer_id, scheduled_ms"))
		if err != nil {
			return err
		}
		get, err := s.prepared(ctx, tx, "SELECT "+execCols+" FROM timer_task WHERE timer_id = ? AND scheduled_ms = ?")
		if err != nil {
			return err
		}
		for i, p := range ps {
			res, err := ins.ExecContext(ctx, claimArgs(p)...)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			var e Execution
			err = get.GetContext(ctx, &e, p.TimerID, p.ScheduledMS)
			if errors.Is(err, sql.ErrNoRows) {
				continue // the timer is not enabled at that version
			}
			if err != nil {
				return err
			}
			out[i] = ClaimResult{Existing: e, Claimed: n == 1}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dao: claim group of %d: %w", len(ps), err)
	}
	return out, nil
}

// retryTx runs fn in a transaction, again (up to claimAttempts times) when it lost an InnoDB
// deadlock or a SQLite busy wait: group writers running at once lock rows of the same
// indexes, and the database picks a victim to roll back rather than wait.
func (s *Store) retryTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.inTx(ctx, fn)
		if err == nil || !isRetryable(err) || attempt == claimAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// prepared returns q prepared for tx. The statement is prepared once per store and, by
// database/sql, once per connection: parsing dominated the cost of small SQLite groups.
// The returned statement belongs to tx (closed with it).
func (s *Store) prepared(ctx context.Context, tx *sqlx.Tx, q string) (*sqlx.Stmt, error) {
	s.stmtMu.Lock()
	st, ok := s.stmts[q]
	if !ok {
		var err error
		if st, err = s.db.PreparexContext(ctx, q); err != nil {
			s.stmtMu.Unlock()
			return nil, err
		}
		if s.stmts == nil {
			s.stmts = map[string]*sqlx.Stmt{}
		}
		s.stmts[q] = st
	}
	s.stmtMu.Unlock()
	return tx.StmtxContext(ctx, st), nil
}

// RecordAttempts records a group of attempts as RecordAttempt does each, in one
// transaction: it finds the executions still running at the given attempt under their
// owner, updates them in one statement and inserts their attempt rows in another. The
// result has one error per attempt: nil, ErrNotFound (lost to another instance) or a
// validation error; the second result is a store failure that wrote nothing.
func (s *Store) RecordAttempts(ctx context.Context, ps []RecordAttemptParams) ([]error, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	if len(ps) > MaxGroup {
		return nil, fmt.Errorf("dao: record group of %d (max %d)", len(ps), MaxGroup)
	}
	errs := make([]error, len(ps))
	valid := make([]int, 0, len(ps))
	ids := make([]int64, 0, len(ps))
	seen := make(map[int64]bool, len(ps))
	for i, p := range ps {
		switch {
		case p.Status != ExecSucceeded && p.Status != ExecFailed && p.Status != ExecPending:
			errs[i] = fmt.Errorf("dao: record attempt of execution %d: bad status %q", p.ID, p.Status)
		case p.Status == ExecPending && p.NextRetryMS <= 0:
			errs[i] = fmt.Errorf("dao: record attempt of execution %d: pending without next_retry_ms", p.ID)
		case seen[p.ID]:
			errs[i] = fmt.Errorf("dao: record attempt of execution %d: twice in one group", p.ID)
		default:
			seen[p.ID] = true
			valid = append(valid, i)
			ids = append(ids, p.ID)
		}
	}
	if len(valid) == 0 {
		return errs, nil
	}
	if s.dialect != DialectMySQL {
		return s.recordEach(ctx, ps, valid, errs)
	}
	err := s.retryTx(ctx, func(tx *sqlx.Tx) error {
		for _, i := range valid {
			errs[i] = nil // a retried transaction decides afresh
		}
		q, args, err := sqlx.In("SELECT id, attempt, owner FROM timer_task WHERE id IN (?) AND status = ?"+s.forUpdate(), ids, ExecRunning)
		if err != nil {
			return err
		}
		var live []struct {
			ID      int64  `db:"id"`
			Attempt int    `db:"attempt"`
			Owner   string `db:"owner"`
		}
		if err := tx.SelectContext(ctx, &live, q, args...); err != nil {
			return fmt.Errorf("find running: %w", err)
		}
		running := make(map[attemptKey]bool, len(live))
		for _, l := range live {
			running[attemptKey{l.ID, l.Attempt, l.Owner}] = true
		}
		var held, gone []int
		for _, i := range valid {
			p := ps[i]
			if running[keyOfAttempt(p)] {
				held = append(held, i)
			} else {
				gone = append(gone, i)
			}
		}
		if err := s.updateAttempts(ctx, tx, ps, held); err != nil {
			return err
		}
		if err := s.insertAttempts(ctx, tx, ps, held); err != nil {
			return err
		}
		return s.sortGone(ctx, tx, ps, gone, errs)
	})
	if err != nil {
		return nil, fmt.Errorf("dao: record group of %d: %w", len(ps), err)
	}
	return errs, nil
}

// recordEach records a group in one SQLite transaction with prepared single-row statements
// (see claimEach).
func (s *Store) recordEach(ctx context.Context, ps []RecordAttemptParams, valid []int, errs []error) ([]error, error) {
	err := s.retryTx(ctx, func(tx *sqlx.Tx) error {
		for _, i := range valid {
			errs[i] = nil
		}
		upd, err := s.prepared(ctx, tx, recordUpdateQuery)
		if err != nil {
			return err
		}
		ins, err := s.prepared(ctx, tx, recordInsertQuery+s.ignoreDuplicateClause("timer_task_attempt", "task_id, attempt"))
		if err != nil {
			return err
		}
		var gone []int
		for _, i := range valid {
			p := ps[i]
			res, err := upd.ExecContext(ctx, recordUpdateArgs(p)...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				gone = append(gone, i)
				continue
			}
			if _, err := ins.ExecContext(ctx, recordInsertArgs(p)...); err != nil {
				return err
			}
		}
		return s.sortGone(ctx, tx, ps, gone, errs)
	})
	if err != nil {
		return nil, fmt.Errorf("dao: record group of %d: %w", len(ps), err)
	}
	return errs, nil
}

// attemptKey names one attempt of an execution by one owner.
type attemptKey struct {
	id      int64
	attempt int
	owner   string
}

func keyOfAttempt(p RecordAttemptParams) attemptKey {
	return attemptKey{p.ID, p.Attempt, truncate(p.Owner, MaxOwnerLen)}
}

// updateAttempts sets the new state of the held executions in one UPDATE: each column is a
// CASE over the ids.
func (s *Store) updateAttempts(ctx context.Context, tx *sqlx.Tx, ps []RecordAttemptParams, held []int) error {
	if len(held) == 0 {
		return nil
	}
	// The SET columns of recordUpdateQuery, in its order.
	cols := []string{"status", "owner", "next_retry_ms", "http_status", "error", "response", "duration_ms", "finished_ms", "updated_ms"}
	vals := make([][]any, len(cols))
	for _, i := range held {
		p := ps[i]
		row := recordUpdateArgs(p)[:len(cols)] // the SET values of the single-row update, in cols order
		for c := range cols {
			vals[c] = append(vals[c], p.ID, row[c])
		}
	}
	var b strings.Builder
	b.WriteString("UPDATE timer_task SET ")
	args := make([]any, 0, 2*len(cols)*len(held)+len(held)+1)
	for c, col := range cols {
		if c > 0 {
			b.WriteString(", ")
		}
		b.WriteString(col + " = CASE id")
		for range held {
			b.WriteString(" WHEN ? THEN ?")
		}
		b.WriteString(" END")
		args = append(args, vals[c]...)
	}
	b.WriteString(" WHERE status = ? AND id IN (?" + strings.Repeat(", ?", len(held)-1) + ")")
	args = append(args, ExecRunning)
	for _, i := range held {
		args = append(args, ps[i].ID)
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("update executions: %w", err)
	}
	return nil
}

// insertAttempts writes the attempt rows of the held executions in one INSERT.
func (s *Store) insertAttempts(ctx context.Context, tx *sqlx.Tx, ps []RecordAttemptParams, held []int) error {
	if len(held) == 0 {
		return nil
	}
	args := make([]any, 0, 8*len(held))
	for _, i := range held {
		args = append(args, recordInsertArgs(ps[i])...)
	}
	q := recordInsertQuery + strings.Repeat(", (?, ?, ?, ?, ?, ?, ?, ?)", len(held)-1) +
		s.ignoreDuplicateClause("timer_task_attempt", "task_id, attempt")
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("insert attempts: %w", err)
	}
	return nil
}

// sortGone tells, for each attempt whose execution is no longer running under its owner,
// whether that owner recorded it already (a retried write whose answer was lost: success)
// or lost it (ErrNotFound).
func (s *Store) sortGone(ctx context.Context, tx *sqlx.Tx, ps []RecordAttemptParams, gone []int, errs []error) error {
	if len(gone) == 0 {
		return nil
	}
	ids := make([]int64, len(gone))
	for j, i := range gone {
		ids[j] = ps[i].ID
	}
	q, args, err := sqlx.In("SELECT task_id, attempt, owner FROM timer_task_attempt WHERE task_id IN (?)", ids)
	if err != nil {
		return err
	}
	var rows []struct {
		TaskID  int64  `db:"task_id"`
		Attempt int    `db:"attempt"`
		Owner   string `db:"owner"`
	}
	if err := tx.SelectContext(ctx, &rows, q, args...); err != nil {
		return fmt.Errorf("find recorded attempts: %w", err)
	}
	recorded := make(map[attemptKey]bool, len(rows))
	for _, r := range rows {
		recorded[attemptKey{r.TaskID, r.Attempt, r.Owner}] = true
	}
	for _, i := range gone {
		p := ps[i]
		if !recorded[keyOfAttempt(p)] {
			errs[i] = ErrNotFound
		}
	}
	return nil
}

// forUpdate locks the rows a transaction reads until it ends. SQLite needs nothing: its
// transactions take the write lock at BEGIN (_txlock=immediate).
func (s *Store) forUpdate() string {
	if s.dialect == DialectMySQL {
		return " FOR UPDATE"
	}
	return ""
}

// OneShot names a one-shot timer at the version whose occurrence ended.
type OneShot struct {
	ID, Version int64
}

// CompleteOneShots completes a group of one-shot timers in one UPDATE, each only if still
// enabled at its version. Unlike CompleteOneShot it does not re-read the schedule: the
// caller vouches that each timer is a one-shot at that version (the executor parsed it).
func (s *Store) CompleteOneShots(ctx context.Context, ts []OneShot, nowMS int64) error {
	if len(ts) == 0 {
		return nil
	}
	// In id order, so concurrent groups lock timer rows in one order.
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b OneShot) int { return cmp.Compare(a.ID, b.ID) })
	var b strings.Builder
	args := make([]any, 0, 2*len(ts)+3)
	args = append(args, StatusCompleted, nowMS, StatusEnabled)
	for i, t := range ts {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(id = ? AND version = ?)")
		args = append(args, t.ID, t.Version)
	}
	q := `UPDATE timer SET status = ?, version = version + 1, updated_ms = ? WHERE status = ? AND (` + b.String() + `)`
	if err := s.retryTx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}); err != nil {
		return fmt.Errorf("dao: complete %d one-shots: %w", len(ts), err)
	}
	return nil
}
