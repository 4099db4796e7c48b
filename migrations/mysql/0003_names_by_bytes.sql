-- taskgate schema version 3 (MySQL 8.0.17+ / MariaDB 10.6+): names compare by bytes.
--
-- `utf8mb4_bin` (migrations 0001 and 0002) compares by bytes but is a PAD SPACE collation:
-- trailing spaces are ignored, so `'q '` equalled `'q'` — a claim from queue "q " took a task
-- of "q", `get("a ")` returned task "a", and business key "k " was refused as a duplicate of
-- "k". Every column that holds a name (ID, type, queue, business key, owner, lease token, the
-- three generated key columns and the name columns of the other tables) moves to the server's
-- NO PAD binary collation, `{nopad_bin}`: MariaDB `utf8mb4_nopad_bin`, MySQL 8.0.17+
-- `utf8mb4_0900_bin` (MySQL 8's `utf8mb4_bin` is PAD SPACE too). The backend substitutes it
-- after reading the server's version (`taskgate_mysql::nopad_collation`) and sets the same
-- collation on every session (`collation_connection`).
--
-- What an existing database gets: every row keeps its bytes; keys and indexes stay as they
-- were (the same names and columns), only their comparisons stop padding. No uniqueness can
-- break: values that differed under PAD SPACE differ under NO PAD too. The STORED generated
-- columns are restated with their expressions, so they are recomputed under the new
-- collation (a business key of one space now heads its chain, as on every other backend).
-- Each ALTER rebuilds its table (a copy on a large `tasks` table takes a while); each
-- statement is idempotent, so a start that died half-way re-runs this file cleanly.
ALTER TABLE {prefix}tasks
    MODIFY id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    MODIFY type VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    MODIFY queue VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    MODIFY lease_token VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL DEFAULT '',
    MODIFY business_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL DEFAULT '',
    MODIFY replay_of VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL DEFAULT '',
    MODIFY owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL DEFAULT '',
    MODIFY chain_head_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} GENERATED ALWAYS AS
        (IF(business_key <> '' AND replay_of = '', business_key, NULL)) STORED,
    MODIFY replay_of_uq VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} GENERATED ALWAYS AS
        (IF(replay_of <> '', replay_of, NULL)) STORED,
    MODIFY ready_queue VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} GENERATED ALWAYS AS
        (IF(status IN ('pending', 'retrying'), queue, NULL)) STORED;
ALTER TABLE {prefix}task_deps
    MODIFY child_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    MODIFY parent_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL;
ALTER TABLE {prefix}quota
    MODIFY qkey VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL;
ALTER TABLE {prefix}paused_queues
    MODIFY queue VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL;
-- New columns added by later migrations take the table default: NO PAD as well.
ALTER TABLE {prefix}tasks DEFAULT CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE {prefix}task_deps DEFAULT CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE {prefix}quota DEFAULT CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE {prefix}paused_queues DEFAULT CHARACTER SET utf8mb4 COLLATE {nopad_bin};
