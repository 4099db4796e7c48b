-- taskgate schema version 7 (PostgreSQL): the time of the last accepted heartbeat of the
-- current lease, unix ms (0 = none). A claim sets it to 0 and each heartbeat to the server's
-- time; a running task's snapshot shows it as `last_heartbeat_at` (contract §1.1.12). A
-- constant default: no table rewrite.
ALTER TABLE {prefix}tasks ADD COLUMN heartbeat_at BIGINT NOT NULL DEFAULT 0;
