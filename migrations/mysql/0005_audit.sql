-- taskgate schema version 5 (MySQL 8.0.17+ / MariaDB 10.6+): the audit log of operator actions
-- (extensions §E13). One row per action taken through `Broker::audited` (the admin API):
-- written in the same transaction as the change it records, or alone for an action the
-- contract rejected. `at_ms` is the broker's clock in milliseconds; `outcome` is `ok` or an
-- error code. Names compare by bytes (`{nopad_bin}`, as migration 0003). Idempotent: MySQL
-- commits DDL implicitly.
CREATE TABLE IF NOT EXISTS {prefix}audit (
    id          VARCHAR(32)  CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    at_ms       BIGINT       NOT NULL,
    actor       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    action_name VARCHAR(32)  CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    target      VARCHAR(300) CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    outcome     VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE {nopad_bin} NOT NULL,
    detail      MEDIUMTEXT   NOT NULL,
    PRIMARY KEY (id),
    KEY {prefix}idx_audit_at (at_ms, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
