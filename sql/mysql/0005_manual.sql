-- 0005: manual executions (the batch "trigger" operation fires a timer once, outside its
-- schedule). manual = 1 marks them: the executor runs them without checking that the
-- schedule has the occurrence, and a one-shot fired by hand is not completed by it.
-- One statement, re-runnable (MariaDB IF NOT EXISTS), see sql/sql.go.

ALTER TABLE timer_task ADD COLUMN IF NOT EXISTS manual TINYINT NOT NULL DEFAULT 0;
