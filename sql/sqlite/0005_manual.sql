-- 0005: manual executions (same shape as mysql/0005_manual.sql).

ALTER TABLE timer_task ADD COLUMN manual INTEGER NOT NULL DEFAULT 0;
