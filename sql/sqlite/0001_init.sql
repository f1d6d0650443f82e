-- 0001: timer definitions and their executions (same shape as mysql/0001_init.sql).
-- Times are UTC unix milliseconds set by the application. AUTOINCREMENT keeps ids from being
-- reused, so id cursors stay monotonic like MySQL's.

CREATE TABLE IF NOT EXISTS timer (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  app          TEXT    NOT NULL,
  name         TEXT    NOT NULL,
  -- name while not deleted, NULL after: UNIQUE ignores NULLs, so a deleted timer frees its name.
  live_name    TEXT    NULL,
  status       TEXT    NOT NULL,
  schedule     TEXT    NOT NULL,
  anchor_ms    INTEGER NOT NULL DEFAULT 0,
  callback     TEXT    NOT NULL,
  retry        TEXT    NOT NULL,
  request_id   TEXT    NULL,
  request_hash TEXT    NOT NULL DEFAULT '',
  version      INTEGER NOT NULL,
  created_ms   INTEGER NOT NULL,
  updated_ms   INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_timer_app_live_name ON timer (app, live_name);
CREATE UNIQUE INDEX IF NOT EXISTS uk_timer_app_request_id ON timer (app, request_id);
CREATE INDEX IF NOT EXISTS idx_timer_status_id ON timer (status, id);
CREATE INDEX IF NOT EXISTS idx_timer_app_id ON timer (app, id);

CREATE TABLE IF NOT EXISTS timer_task (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  timer_id      INTEGER NOT NULL,
  scheduled_ms  INTEGER NOT NULL,
  status        TEXT    NOT NULL,
  attempt       INTEGER NOT NULL DEFAULT 0,
  owner         TEXT    NOT NULL DEFAULT '',
  timer_version INTEGER NOT NULL DEFAULT 0,
  started_ms    INTEGER NOT NULL DEFAULT 0,
  finished_ms   INTEGER NOT NULL DEFAULT 0,
  duration_ms   INTEGER NOT NULL DEFAULT 0,
  http_status   INTEGER NOT NULL DEFAULT 0,
  error         TEXT    NOT NULL DEFAULT '',
  response      TEXT    NOT NULL DEFAULT '',
  created_ms    INTEGER NOT NULL,
  updated_ms    INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_timer_task_occurrence ON timer_task (timer_id, scheduled_ms);
CREATE INDEX IF NOT EXISTS idx_timer_task_timer_id ON timer_task (timer_id, id);
CREATE INDEX IF NOT EXISTS idx_timer_task_status_updated ON timer_task (status, updated_ms);
