-- taskgate schema version 7 (MySQL 8.0.17+ / MariaDB 10.6+): the time of the last accepted
-- heartbeat of the current lease, unix ms (0 = none). A claim sets it to 0 and each heartbeat
-- to the server's time; a running task's snapshot shows it as `last_heartbeat_at` (contract
-- §1.1.12).
--
-- Idempotent for a re-run after a crash: an `ADD COLUMN` that already ran fails with 1060,
-- "already applied" for the runner.
ALTER TABLE {prefix}tasks ADD COLUMN heartbeat_at BIGINT NOT NULL DEFAULT 0;
