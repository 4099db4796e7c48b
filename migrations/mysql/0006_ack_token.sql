-- taskgate schema version 6 (MySQL 8.0.17+ / MariaDB 10.6+): the token of the ack that
-- completed a task, written by PostgreSQL's one-statement ack (see
-- migrations/postgres/0006_ack_token.sql) to settle an ack whose answer was lost. MySQL's acks
-- lock the rows first in a transaction and never write it; the column keeps the schemas of
-- every dialect alike (extensions §E6).
--
-- Idempotent for a re-run after a crash: an `ADD COLUMN` that already ran fails with 1060,
-- "already applied" for the runner.
ALTER TABLE {prefix}tasks
    ADD COLUMN ack_token VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL DEFAULT '';
