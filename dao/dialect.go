package dao

// Every difference between MySQL and SQLite lives in this file: opening and pooling, the
// migration lock, the "ignore the duplicate" clause of the claim, and reading driver errors.
// All other queries are shared text with ? placeholders.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

func openMySQL(o Options) (*sqlx.DB, error) {
	cfg, err := mysql.ParseDSN(o.MySQLDSN)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	// Rows affected must mean "changed", not "matched": ClaimExecution tells a fresh insert
	// (1) from an ignored duplicate (0) by it.
	cfg.ClientFoundRows = false
	// Client-side interpolation: one round trip per statement instead of prepare, execute
	// and close (the engine's claims and results are round-trip bound). Safe with the
	// utf8mb4 connection charset; an explicit interpolateParams in the DSN wins.
	if !strings.Contains(o.MySQLDSN, "interpolateParams=") {
		cfg.InterpolateParams = true
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connector: %w", err)
	}
	db := sqlx.NewDb(sql.OpenDB(conn), "mysql")
	n := o.MaxOpenConns
	if n <= 0 {
		n = 32
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	// Recycle connections before server-side wait_timeout or a proxy drops them.
	db.SetConnMaxLifetime(3 * time.Minute)
	db.SetConnMaxIdleTime(time.Minute)
	return db, nil
}

// openSQLite opens the file with WAL (readers never block the writer) and a busy timeout
// (a writer waits for the lock instead of failing with SQLITE_BUSY). Several connections are
// kept so reads run in parallel; _txlock=immediate makes every transaction take the write
// lock at BEGIN: a deferred transaction that reads and then writes cannot wait for the lock
// (SQLite returns SQLITE_BUSY at once to avoid a deadlock), an immediate one just waits out
// busy_timeout. Single write statements outside transactions take the write lock when they
// start, so they wait too.
func openSQLite(o Options) (*sqlx.DB, error) {
	path := o.SQLitePath
	if strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("sqlite path %q must not contain '?'", path)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create directory: %w", err)
		}
	}
	dsn := path + "?_txlock=immediate&_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL"
	db, err := sqlx.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	n := o.MaxOpenConns
	if n <= 0 || n > 8 {
		// There is one writer at a time anyway; more connections only add waiting writers.
		n = 8
	}
	if path == ":memory:" {
		// Every connection would open its own empty in-memory database: keep exactly one.
		n = 1
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return db, nil
}

// ignoreDuplicateClause ends an INSERT so that a row with an existing unique key is silently
// skipped (rows affected 0), and nothing else is: MySQL's INSERT IGNORE would also turn
// truncation and NOT NULL errors into warnings.
func (s *Store) ignoreDuplicateClause(table, conflictCols string) string {
	if s.dialect == DialectMySQL {
		// Qualified: in INSERT ... SELECT a bare id could also mean the selected table's.
		return " ON DUPLICATE KEY UPDATE " + table + ".id = " + table + ".id"
	}
	return " ON CONFLICT (" + conflictCols + ") DO NOTHING"
}

// uniqueViolation reports which unique index err violates: the index name for MySQL
// ("Duplicate entry '...' for key 'uk_timer_app_live_name'"), the column list for SQLite
// ("UNIQUE constraint failed: timer.app, timer.live_name"). ok is false for other errors.
func uniqueViolation(err error) (detail string, ok bool) {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 {
		return me.Message, true
	}
	var se *sqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return se.Error(), true
	}
	return "", false
}

// isNameTaken and isRequestIDTaken tell the two unique keys of timer apart.
func isNameTaken(err error) bool {
	d, ok := uniqueViolation(err)
	return ok && (strings.Contains(d, "uk_timer_app_live_name") || strings.Contains(d, "timer.live_name"))
}

func isRequestIDTaken(err error) bool {
	d, ok := uniqueViolation(err)
	return ok && (strings.Contains(d, "uk_timer_app_request_id") || strings.Contains(d, "timer.request_id"))
}

// isRetryable reports a transient lock conflict after which the statement may simply run
// again: an InnoDB deadlock or lock wait timeout, or SQLite still busy after busy_timeout.
func isRetryable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1213 || me.Number == 1205
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()&0xff == sqlite3.SQLITE_BUSY || se.Code()&0xff == sqlite3.SQLITE_LOCKED
	}
	return false
}

// lockMigrations serializes Migrate across processes and runs apply under the lock. MySQL
// cannot roll back DDL, so a named lock held on one connection makes concurrent starters
// wait for the first and then find everything applied. SQLite runs DDL in transactions: one
// immediate transaction is both the lock and atomic.
func (s *Store) lockMigrations(ctx context.Context, apply func(q queryer) error) error {
	if s.dialect == DialectSQLite {
		tx, err := s.db.BeginTxx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		if err := apply(tx); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	}

	conn, err := s.db.Connx(ctx)
	if err != nil {
		return fmt.Errorf("connection: %w", err)
	}
	defer func() { _ = conn.Close() }()
	var dbName *string
	if err := conn.GetContext(ctx, &dbName, "SELECT DATABASE()"); err != nil {
		return fmt.Errorf("current database: %w", err)
	}
	// GET_LOCK names are server-wide: include the database so separate deployments (and
	// parallel tests) sharing a server do not wait for each other. Names are at most 64 chars.
	name := "tock_migrate"
	if dbName != nil {
		name += ":" + *dbName
	}
	if len(name) > 64 {
		name = name[:64]
	}
	var got *int64
	if err := conn.GetContext(ctx, &got, "SELECT GET_LOCK(?, ?)", name, 120); err != nil {
		return fmt.Errorf("get lock %s: %w", name, err)
	}
	if got == nil || *got != 1 {
		return fmt.Errorf("get lock %s: not granted within 120s", name)
	}
	defer func() {
		// Release even when ctx is done; closing the connection would release it too.
		var released *int64
		_ = conn.GetContext(context.WithoutCancel(ctx), &released, "SELECT RELEASE_LOCK(?)", name)
	}()
	return apply(conn)
}
