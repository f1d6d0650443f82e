-- 0003: retries, leases and attempts (same shape as mysql/0003_reliability.sql).

ALTER TABLE timer_task ADD COLUMN heartbeat_ms INTEGER NOT NULL DEFAULT 0;

ALTER TABLE timer_task ADD COLUMN next_retry_ms INTEGER NOT NULL DEFAULT 0;

CREATE INDEX IF NOT EXISTS idx_timer_task_status_retry ON timer_task (status, next_retry_ms);

CREATE TABLE IF NOT EXISTS timer_task_attempt (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  task_id     INTEGER NOT NULL,
  attempt     INTEGER NOT NULL,
  owner       TEXT    NOT NULL DEFAULT '',
  started_ms  INTEGER NOT NULL DEFAULT 0,
  finished_ms INTEGER NOT NULL DEFAULT 0,
  duration_ms INTEGER NOT NULL DEFAULT 0,
  http_status INTEGER NOT NULL DEFAULT 0,
  error       TEXT    NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_timer_task_attempt ON timer_task_attempt (task_id, attempt);
