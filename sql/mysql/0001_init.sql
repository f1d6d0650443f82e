-- 0001: timer definitions and their executions.
-- Times are UTC unix milliseconds set by the application (never NOW()), so the engine can
-- run in virtual time. utf8mb4_bin compares names and request ids byte for byte, like SQLite.

CREATE TABLE IF NOT EXISTS timer (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  app          VARCHAR(64)  NOT NULL,
  name         VARCHAR(128) NOT NULL,
  -- live_name is name while the timer is not deleted and NULL after: UNIQUE ignores NULLs,
  -- so names are unique per app among live timers and a deleted timer frees its name.
  live_name    VARCHAR(128) NULL,
  status       VARCHAR(16)  NOT NULL,
  schedule     TEXT         NOT NULL,
  anchor_ms    BIGINT       NOT NULL DEFAULT 0,
  callback     TEXT         NOT NULL,
  retry        TEXT         NOT NULL,
  -- request_id is the client's idempotency key, NULL when not given.
  request_id   VARCHAR(128) NULL,
  request_hash VARCHAR(64)  NOT NULL DEFAULT '',
  version      BIGINT       NOT NULL,
  created_ms   BIGINT       NOT NULL,
  updated_ms   BIGINT       NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_timer_app_live_name (app, live_name),
  UNIQUE KEY uk_timer_app_request_id (app, request_id),
  KEY idx_timer_status_id (status, id),
  KEY idx_timer_app_id (app, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS timer_task (
  id            BIGINT        NOT NULL AUTO_INCREMENT,
  timer_id      BIGINT        NOT NULL,
  scheduled_ms  BIGINT        NOT NULL,
  status        VARCHAR(16)   NOT NULL,
  attempt       INT           NOT NULL DEFAULT 0,
  owner         VARCHAR(128)  NOT NULL DEFAULT '',
  timer_version BIGINT        NOT NULL DEFAULT 0,
  -- 0 means not yet.
  started_ms    BIGINT        NOT NULL DEFAULT 0,
  finished_ms   BIGINT        NOT NULL DEFAULT 0,
  duration_ms   BIGINT        NOT NULL DEFAULT 0,
  http_status   INT           NOT NULL DEFAULT 0,
  error         VARCHAR(1024) NOT NULL DEFAULT '',
  response      VARCHAR(1024) NOT NULL DEFAULT '',
  created_ms    BIGINT        NOT NULL,
  updated_ms    BIGINT        NOT NULL,
  PRIMARY KEY (id),
  -- One row per occurrence: the same (timer_id, scheduled_ms) is the Redis member and the
  -- callback's Idempotency-Key.
  UNIQUE KEY uk_timer_task_occurrence (timer_id, scheduled_ms),
  KEY idx_timer_task_timer_id (timer_id, id),
  KEY idx_timer_task_status_updated (status, updated_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
