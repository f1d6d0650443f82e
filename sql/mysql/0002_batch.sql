-- 0002: batch operations over many timers (package batch). A batch_job is split into one
-- batch_task per target timer. Tasks are claimed by compare-and-set on (status, version), never
-- by a transaction held across the work; deadline_ms lets any instance take back a task whose
-- runner died. Times are UTC unix milliseconds set by the application.

CREATE TABLE IF NOT EXISTS batch_job (
  id                   BIGINT        NOT NULL AUTO_INCREMENT,
  -- app of the selector, or the one app all listed timers belong to ('' when several).
  app                  VARCHAR(64)   NOT NULL DEFAULT '',
  operation            VARCHAR(32)   NOT NULL,
  status               VARCHAR(24)   NOT NULL,
  -- target as given (selector, or the number of listed ids), JSON.
  target               TEXT          NOT NULL,
  -- operation parameters (the partial timer of an update), JSON; '' when none.
  params               MEDIUMTEXT    NOT NULL,
  -- request_id is the client's idempotency key, NULL when not given.
  request_id           VARCHAR(128)  NULL,
  request_hash         VARCHAR(64)   NOT NULL DEFAULT '',
  total                INT           NOT NULL,
  version              BIGINT        NOT NULL,
  created_ms           BIGINT        NOT NULL,
  updated_ms           BIGINT        NOT NULL,
  -- 0 means not yet.
  started_ms           BIGINT        NOT NULL DEFAULT 0,
  finished_ms          BIGINT        NOT NULL DEFAULT 0,
  rollback_started_ms  BIGINT        NOT NULL DEFAULT 0,
  rollback_finished_ms BIGINT        NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  UNIQUE KEY uk_batch_job_request_id (request_id),
  KEY idx_batch_job_app_id (app, id),
  KEY idx_batch_job_status_id (status, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS batch_task (
  id           BIGINT        NOT NULL AUTO_INCREMENT,
  batch_id     BIGINT        NOT NULL,
  timer_id     BIGINT        NOT NULL,
  status       VARCHAR(24)   NOT NULL,
  -- retries of the current phase (forward or rollback); at most the configured maximum.
  retry        INT           NOT NULL DEFAULT 0,
  -- bumped by every write: claims and releases compare-and-set on it.
  version      BIGINT        NOT NULL,
  -- instance that claimed the task last.
  owner        VARCHAR(128)  NOT NULL DEFAULT '',
  -- a running task not released by then is taken back (pending again, or failed).
  deadline_ms  BIGINT        NOT NULL DEFAULT 0,
  -- the timer before and after the change (JSON), NULL until recorded; rollback restores
  -- before_image when the timer is still at after_image's version.
  before_image MEDIUMTEXT    NULL,
  after_image  MEDIUMTEXT    NULL,
  error        VARCHAR(1024) NOT NULL DEFAULT '',
  started_ms   BIGINT        NOT NULL DEFAULT 0,
  finished_ms  BIGINT        NOT NULL DEFAULT 0,
  created_ms   BIGINT        NOT NULL,
  updated_ms   BIGINT        NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_batch_task_target (batch_id, timer_id),
  -- dispatch, counts, take-backs and task pages all go by batch and status; running tasks
  -- exist only in unfinished batches, so no index on status alone is needed.
  KEY idx_batch_task_batch_status (batch_id, status, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
