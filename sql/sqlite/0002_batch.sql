-- 0002: batch operations over many timers (same shape as mysql/0002_batch.sql).

CREATE TABLE IF NOT EXISTS batch_job (
  id                   INTEGER PRIMARY KEY AUTOINCREMENT,
  app                  TEXT    NOT NULL DEFAULT '',
  operation            TEXT    NOT NULL,
  status               TEXT    NOT NULL,
  target               TEXT    NOT NULL,
  params               TEXT    NOT NULL,
  request_id           TEXT    NULL,
  request_hash         TEXT    NOT NULL DEFAULT '',
  total                INTEGER NOT NULL,
  version              INTEGER NOT NULL,
  created_ms           INTEGER NOT NULL,
  updated_ms           INTEGER NOT NULL,
  started_ms           INTEGER NOT NULL DEFAULT 0,
  finished_ms          INTEGER NOT NULL DEFAULT 0,
  rollback_started_ms  INTEGER NOT NULL DEFAULT 0,
  rollback_finished_ms INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_batch_job_request_id ON batch_job (request_id);
CREATE INDEX IF NOT EXISTS idx_batch_job_app_id ON batch_job (app, id);
CREATE INDEX IF NOT EXISTS idx_batch_job_status_id ON batch_job (status, id);

CREATE TABLE IF NOT EXISTS batch_task (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  batch_id     INTEGER NOT NULL,
  timer_id     INTEGER NOT NULL,
  status       TEXT    NOT NULL,
  retry        INTEGER NOT NULL DEFAULT 0,
  version      INTEGER NOT NULL,
  owner        TEXT    NOT NULL DEFAULT '',
  deadline_ms  INTEGER NOT NULL DEFAULT 0,
  before_image TEXT    NULL,
  after_image  TEXT    NULL,
  error        TEXT    NOT NULL DEFAULT '',
  started_ms   INTEGER NOT NULL DEFAULT 0,
  finished_ms  INTEGER NOT NULL DEFAULT 0,
  created_ms   INTEGER NOT NULL,
  updated_ms   INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_batch_task_target ON batch_task (batch_id, timer_id);
CREATE INDEX IF NOT EXISTS idx_batch_task_batch_status ON batch_task (batch_id, status, id);
