// Package dao is tock's storage: table timer (definitions) and table timer_task (one row per
// occurrence, i.e. per (timer_id, scheduled_ms), recording its execution), over MySQL/MariaDB
// in production and SQLite (modernc.org/sqlite, no cgo) in embedded mode.
//
// One Store type serves both backends with the same SQL text (? placeholders); everything
// that differs -- opening and pooling, the migration lock, how an INSERT ignores a duplicate,
// how driver errors read -- is in dialect.go. The schema is versioned in package
// github.com/tockd/tock/sql and applied by Store.Migrate.
//
// Rules the methods keep:
//   - Time is always a parameter (nowMS, NowMS), never SQL NOW(), so the engine can run in
//     virtual time; all times are UTC unix milliseconds.
//   - Timers are soft-deleted. live_name holds the name while the timer is not deleted and
//     NULL after, so UNIQUE(app, live_name) keeps names unique among live timers on both
//     backends and a deleted timer frees its name. request_id is NULL when not given, so
//     UNIQUE(app, request_id) only binds real idempotency keys.
//   - Every change of a timer bumps its version (optimistic locking). The engine claims an
//     occurrence at the version it computed the occurrence from: ClaimExecution inserts the
//     timer_task row with one INSERT ... SELECT that also checks the timer is enabled at that
//     version, so of concurrent claimers (or a claimer racing an update) exactly one wins.
//   - Lookups answer ErrNotFound, ErrNameTaken or ErrVersionConflict unwrapped, so callers
//     compare with errors.Is; other errors are wrapped with what was being done.
//
// Tests get migrated stores of both backends from package daotest.
package dao
