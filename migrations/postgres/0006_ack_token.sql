-- taskgate schema version 6 (PostgreSQL): the token of the ack that completed a task. An ack of
-- a childless task runs as one autocommit statement (no BEGIN, no COMMIT round trip); when its
-- connection is lost before the answer, the broker cannot tell from the row whether that
-- statement was applied (its lease token is cleared and its finish time was the server's).
-- The statement also writes the token it acked with here: the token is unique to one claim,
-- so `ack_token` equal to it proves that ack applied. Other paths leave it as it is; it is
-- never part of a task's snapshot. A constant default: no table rewrite.
ALTER TABLE {prefix}tasks ADD COLUMN ack_token TEXT COLLATE "C" NOT NULL DEFAULT '';
