-- taskgate schema version 6 (SQLite): the token of the ack that completed a task, written by
-- PostgreSQL's one-statement ack (see migrations/postgres/0006_ack_token.sql) to settle an ack
-- whose answer was lost. SQLite's acks run in its writer's transactions and never write it;
-- the column keeps the schemas of every dialect alike (extensions §E6).
ALTER TABLE {prefix}tasks ADD COLUMN ack_token TEXT NOT NULL DEFAULT '';
