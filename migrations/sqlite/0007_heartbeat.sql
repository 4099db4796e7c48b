-- taskgate schema version 7 (SQLite): the time of the last accepted heartbeat of the current
-- lease, unix ms (0 = none). A claim sets it to 0 and each heartbeat to the broker's time; a
-- running task's snapshot shows it as `last_heartbeat_at` (contract §1.1.12).
ALTER TABLE {prefix}tasks ADD COLUMN heartbeat_at INTEGER NOT NULL DEFAULT 0;
