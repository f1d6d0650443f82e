-- 0004: catch-up and compensation (same shape as mysql/0004_compensation.sql).

ALTER TABLE timer ADD COLUMN misfire TEXT NOT NULL DEFAULT 'fire_all';

CREATE TABLE IF NOT EXISTS slice_done (
  slice_start_ms INTEGER NOT NULL,
  bucket         INTEGER NOT NULL,
  completed_ms   INTEGER NOT NULL,
  instance       TEXT    NOT NULL DEFAULT '',
  PRIMARY KEY (slice_start_ms, bucket)
);
