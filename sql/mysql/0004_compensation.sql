-- 0004: catch-up and compensation (package compensator).
-- timer.misfire says what becomes of occurrences missed while every instance was down:
-- fire_all, fire_once or skip. slice_done records each (minute slice, bucket) whose trigger
-- ran to the end, so the compensation loop recomputes occurrences only for slices NOT in it.
-- Each statement is re-runnable (MariaDB IF NOT EXISTS), since MySQL commits DDL one by one.

ALTER TABLE timer ADD COLUMN IF NOT EXISTS misfire VARCHAR(16) NOT NULL DEFAULT 'fire_all';

CREATE TABLE IF NOT EXISTS slice_done (
  -- the slice's minute, UTC unix milliseconds, and its bucket
  slice_start_ms BIGINT       NOT NULL,
  bucket         INT          NOT NULL,
  completed_ms   BIGINT       NOT NULL,
  -- instance whose trigger completed it
  instance       VARCHAR(128) NOT NULL DEFAULT '',
  PRIMARY KEY (slice_start_ms, bucket)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
