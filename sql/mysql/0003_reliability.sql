-- 0003: retries, leases and attempts (reliability A).
-- heartbeat_ms: the owner's last lease renewal (every renewal also moves updated_ms, so the
-- takeover scan reads the existing (status, updated_ms) index: a running row whose
-- updated_ms is older than the allowed missed beats has lost its owner).
-- next_retry_ms: when a pending execution's next attempt is due (0: none); the retry poller
-- claims status = 'pending' AND next_retry_ms <= now through idx_timer_task_status_retry.
-- Each statement is re-runnable (MariaDB IF NOT EXISTS), see sql/sql.go.

ALTER TABLE timer_task ADD COLUMN IF NOT EXISTS heartbeat_ms BIGINT NOT NULL DEFAULT 0;

ALTER TABLE timer_task ADD COLUMN IF NOT EXISTS next_retry_ms BIGINT NOT NULL DEFAULT 0;

CREATE INDEX IF NOT EXISTS idx_timer_task_status_retry ON timer_task (status, next_retry_ms);

-- One row per attempt of an execution, written with the attempt's result.
CREATE TABLE IF NOT EXISTS timer_task_attempt (
  id          BIGINT        NOT NULL AUTO_INCREMENT,
  task_id     BIGINT        NOT NULL,
  attempt     INT           NOT NULL,
  owner       VARCHAR(128)  NOT NULL DEFAULT '',
  started_ms  BIGINT        NOT NULL DEFAULT 0,
  finished_ms BIGINT        NOT NULL DEFAULT 0,
  duration_ms BIGINT        NOT NULL DEFAULT 0,
  http_status INT           NOT NULL DEFAULT 0,
  error       VARCHAR(1024) NOT NULL DEFAULT '',
  PRIMARY KEY (id),
  UNIQUE KEY uk_timer_task_attempt (task_id, attempt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
