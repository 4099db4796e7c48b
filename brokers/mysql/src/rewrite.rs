//! The last step before a statement reaches MySQL: two equivalence-preserving rewrites of the
//! engine's shared SQL that MySQL needs and the engine has no dialect hook for (yet).
//!
//! 1. **`cursor` is a reserved word** in MySQL and MariaDB. The engine names the column bare
//!    (fine on SQLite and PostgreSQL); here every bare identifier `cursor` outside quotes
//!    becomes `` `cursor` ``.
//! 2. **The ready predicate uses the ready index.** `queue = ? AND status IN ('pending',
//!    'retrying')` (and the `queue IN (…)` form) becomes `ready_queue = ?` (`ready_queue IN
//!    (…)`), where `ready_queue` is the STORED generated column of migration 0002 that holds
//!    `queue` exactly while the status is pending or retrying and NULL otherwise — so the two
//!    predicates select the same rows. Without it MySQL answers a claim's
//!    `ORDER BY run_at, id LIMIT n FOR UPDATE SKIP LOCKED` with a range over two statuses and a
//!    filesort, which locks *every* ready row of the queue until commit: concurrent claimers
//!    then find nothing (measured on MariaDB 10.11). On `idx_ready (ready_queue, run_at, id)`
//!    the scan is in order and stops after `n` unlocked rows, and finished rows are never in
//!    the range.
//!
//!    The rewritten `FROM <prefix>tasks WHERE …` also gets `FORCE INDEX (<prefix>idx_ready)`,
//!    so the plan cannot flip to a table scan when statistics undercount the ready rows.
//!
//! 3. **The next-due probe reads one entry per queue**: its `MIN(run_at) … AND queue NOT IN
//!    (paused)` becomes the first entry of the ready index in a derived table (see
//!    [`earliest_first`]).
//!
//! All are pure text substitutions with the same number and order of `?` placeholders, so the
//! bound arguments are untouched. The EXPLAIN test checks the statements the broker really
//! runs, so a change of the engine's text that bypasses rewrite 2 fails a test instead of
//! silently slowing claims. A dialect hook in the engine would make this module unnecessary.

use std::borrow::Cow;

/// The status half of the ready predicate, exactly as the engine writes it.
const READY_STATUSES: &str = " AND status IN ('pending', 'retrying')";

/// Applies the rewrites; borrows when nothing changes (the common case).
pub(crate) fn for_mysql(sql: &str) -> Cow<'_, str> {
    let quoted = quote_cursor(sql);
    match ready_predicate(&quoted) {
        Some(rewritten) => Cow::Owned(earliest_first(&rewritten).unwrap_or(rewritten)),
        None => quoted,
    }
}

/// The next-due probe's per-queue part after rewrite 2.
const MIN_HEAD: &str = "SELECT MIN(run_at) AS m FROM ";
const MIN_FILTER: &str = " WHERE ready_queue = ? AND queue NOT IN (SELECT queue FROM ";

/// Rewrite 3: the next-due probe reads one index entry per queue, not every ready row.
///
/// `SELECT MIN(run_at) AS m FROM t WHERE ready_queue = ? AND queue NOT IN (SELECT queue FROM
/// p)` becomes `SELECT MIN(run_at) AS m FROM (SELECT run_at, queue FROM t WHERE ready_queue =
/// ? ORDER BY run_at LIMIT 1) r WHERE queue NOT IN (SELECT queue FROM p)`. Every row with
/// `ready_queue = q` has `queue = q`, so the paused filter keeps all of them or none, and the
/// minimum is the first entry of the ready index. MariaDB 10.11 cannot shortcut `MIN` past
/// the per-row `NOT IN`, and read every ready row of the queue on each poll (~250 ms at 50,000
/// ready tasks; one entry after this rewrite).
fn earliest_first(sql: &str) -> Option<String> {
    let mut out = String::with_capacity(sql.len() + 64);
    let mut rest = sql;
    let mut changed = false;
    while let Some(at) = rest.find(MIN_HEAD) {
        let after_head = &rest[at + MIN_HEAD.len()..];
        let Some(parts) = min_parts(after_head) else {
            out.push_str(&rest[..at + MIN_HEAD.len()]);
            rest = after_head;
            continue;
        };
        let (source, paused, consumed) = parts;
        out.push_str(&rest[..at]);
        out.push_str(&format!(
            "{MIN_HEAD}(SELECT run_at, queue FROM {source} WHERE ready_queue = ? ORDER BY run_at \
             LIMIT 1) r WHERE queue NOT IN (SELECT queue FROM {paused})"
        ));
        rest = &after_head[consumed..];
        changed = true;
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// Splits `<table> [FORCE INDEX (<index>)] WHERE ready_queue = ? AND queue NOT IN (SELECT
/// queue FROM <paused>)…` into the table part, the paused table and the length consumed.
fn min_parts(text: &str) -> Option<(&str, &str, usize)> {
    let filter = text.find(MIN_FILTER)?;
    let source = &text[..filter];
    let plain = |s: &str| !s.is_empty() && s.bytes().all(is_ident);
    let source_ok = match source.split_once(" FORCE INDEX (") {
        Some((table, index)) => plain(table) && index.strip_suffix(')').is_some_and(plain),
        None => plain(source),
    };
    let paused_start = filter + MIN_FILTER.len();
    let paused_len = text[paused_start..].find(')')?;
    let paused = &text[paused_start..paused_start + paused_len];
    (source_ok && plain(paused)).then_some((source, paused, paused_start + paused_len + 1))
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
}

/// Quotes every bare `cursor` identifier outside string literals and quoted identifiers.
fn quote_cursor(sql: &str) -> Cow<'_, str> {
    const WORD: &[u8] = b"cursor";
    if !sql.as_bytes().windows(WORD.len()).any(|w| w.eq_ignore_ascii_case(WORD)) {
        return Cow::Borrowed(sql);
    }
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut quote: Option<u8> = None;
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'\'' || c == b'"' || c == b'`' => quote = Some(c),
            None => {
                let end = i + WORD.len();
                let word = bytes.get(i..end).is_some_and(|w| w.eq_ignore_ascii_case(WORD));
                let before = i == 0 || !is_ident(bytes[i - 1]);
                let after = bytes.get(end).is_none_or(|b| !is_ident(*b));
                if word && before && after {
                    out.push_str(&sql[start..i]);
                    out.push('`');
                    out.push_str(&sql[i..end]);
                    out.push('`');
                    start = end;
                    i = end;
                    continue;
                }
            }
        }
        i += 1;
    }
    out.push_str(&sql[start..]);
    Cow::Owned(out)
}

/// Rewrites every `queue = ? AND status IN ('pending', 'retrying')` and `queue IN (?, …) AND
/// status IN ('pending', 'retrying')` to the `ready_queue` form; `None` when there is none.
fn ready_predicate(sql: &str) -> Option<String> {
    if !sql.contains(READY_STATUSES) {
        return None;
    }
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    let mut changed = false;
    while let Some(at) = rest.find(READY_STATUSES) {
        let head = &rest[..at];
        match queue_condition_start(head) {
            Some(q) => {
                let before = &head[..q];
                match index_hint_at(before) {
                    Some((at, hint)) => {
                        out.push_str(&before[..at]);
                        out.push_str(&hint);
                        out.push_str(&before[at..]);
                    }
                    None => out.push_str(before),
                }
                out.push_str("ready_");
                out.push_str(&head[q..]);
                changed = true;
            }
            None => {
                out.push_str(head);
                out.push_str(READY_STATUSES);
            }
        }
        rest = &rest[at + READY_STATUSES.len()..];
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// For text ending `FROM <prefix>tasks WHERE `: where to insert ` FORCE INDEX
/// (<prefix>idx_ready)` and the hint itself. The hint keeps the plan independent of
/// statistics: `ready_queue` is NULL for every finished row, so InnoDB's per-key average
/// (NULLs counted as one value) can make a table scan look cheaper than the ready index
/// (observed on MariaDB 10.11 after ANALYZE with 4,000 finished rows).
fn index_hint_at(before: &str) -> Option<(usize, String)> {
    let table_end = before.strip_suffix(" WHERE ")?.len();
    let from = before[..table_end].rfind("FROM ")? + "FROM ".len();
    let table = &before[from..table_end];
    let prefix = table.strip_suffix("tasks")?;
    let plain = !table.is_empty() && table.bytes().all(is_ident);
    plain.then(|| (table_end, format!(" FORCE INDEX ({prefix}idx_ready)")))
}

/// Where the bare `queue` of a `queue = ?` / `queue IN (?, …)` condition ending `head` starts.
fn queue_condition_start(head: &str) -> Option<usize> {
    let condition = if let Some(h) = head.strip_suffix("queue = ?") {
        h.len()
    } else {
        let open = head.strip_suffix(')')?.rfind("queue IN (")?;
        let list = &head[open + "queue IN (".len()..head.len() - 1];
        if list.is_empty() || !list.split(", ").all(|p| p == "?") {
            return None;
        }
        open
    };
    let bare = condition == 0 || !is_ident(head.as_bytes()[condition - 1]);
    let qualified = condition > 0 && head.as_bytes()[condition - 1] == b'.';
    (bare && !qualified).then_some(condition)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_is_quoted_only_as_a_bare_identifier() {
        assert_eq!(
            for_mysql("SELECT id, cursor, progress FROM t WHERE a = 'cursor'"),
            "SELECT id, `cursor`, progress FROM t WHERE a = 'cursor'"
        );
        assert_eq!(
            for_mysql("UPDATE t SET cursor = ? WHERE id = ?"),
            "UPDATE t SET `cursor` = ? WHERE id = ?"
        );
        assert_eq!(
            for_mysql("ALTER TABLE t ADD COLUMN `cursor` LONGBLOB"),
            "ALTER TABLE t ADD COLUMN `cursor` LONGBLOB"
        );
        assert_eq!(
            for_mysql("SELECT cursors, my_cursor FROM t"),
            "SELECT cursors, my_cursor FROM t"
        );
        assert_eq!(for_mysql("SELECT c.cursor FROM t c"), "SELECT c.`cursor` FROM t c");
    }

    #[test]
    fn single_queue_ready_predicate_uses_ready_queue() {
        let sql = "SELECT id FROM p_tasks WHERE queue = ? AND status IN ('pending', 'retrying') \
                   AND run_at <= ? AND queue NOT IN (SELECT queue FROM p) ORDER BY run_at, id";
        assert_eq!(
            for_mysql(sql),
            "SELECT id FROM p_tasks FORCE INDEX (p_idx_ready) WHERE ready_queue = ? \
             AND run_at <= ? AND queue NOT IN (SELECT queue FROM p) ORDER BY run_at, id"
        );
    }

    #[test]
    fn queue_lists_and_repeated_predicates_are_rewritten() {
        let sql = "SELECT 1 FROM t WHERE queue IN (?, ?, ?) AND status IN ('pending', 'retrying') \
                   UNION ALL SELECT 1 FROM t WHERE queue = ? AND status IN ('pending', 'retrying')";
        assert_eq!(
            for_mysql(sql),
            "SELECT 1 FROM t WHERE ready_queue IN (?, ?, ?) UNION ALL SELECT 1 FROM t WHERE ready_queue = ?"
        );
    }

    #[test]
    fn other_shapes_are_left_alone() {
        for sql in [
            "SELECT 1 FROM t WHERE status IN ('pending', 'retrying')",
            "SELECT 1 FROM t WHERE c.queue = ? AND status IN ('pending', 'retrying')",
            "SELECT 1 FROM t WHERE my_queue = ? AND status IN ('pending', 'retrying')",
            "SELECT 1 FROM t WHERE queue IN (SELECT q FROM x) AND status IN ('pending', 'retrying')",
            "SELECT 1 FROM t WHERE queue = ? AND status IN ('pending')",
        ] {
            assert_eq!(for_mysql(sql), sql);
        }
    }

    #[test]
    fn the_next_due_probe_reads_the_first_ready_entry() {
        let probe = "SELECT MIN(m), COALESCE(?, 1) FROM (SELECT MIN(run_at) AS m FROM p_tasks WHERE \
                     queue = ? AND status IN ('pending', 'retrying') AND queue NOT IN (SELECT queue \
                     FROM p_paused_queues) UNION ALL SELECT MIN(run_at) AS m FROM p_tasks WHERE \
                     queue = ? AND status IN ('pending', 'retrying') AND queue NOT IN (SELECT queue \
                     FROM p_paused_queues)) e";
        let part = "SELECT MIN(run_at) AS m FROM (SELECT run_at, queue FROM p_tasks FORCE INDEX \
                    (p_idx_ready) WHERE ready_queue = ? ORDER BY run_at LIMIT 1) r WHERE queue NOT IN \
                    (SELECT queue FROM p_paused_queues)";
        assert_eq!(
            for_mysql(probe),
            format!("SELECT MIN(m), COALESCE(?, 1) FROM ({part} UNION ALL {part}) e")
        );
        assert_eq!(for_mysql(probe).matches('?').count(), 3);
    }

    #[test]
    fn placeholders_keep_their_count() {
        let sql = "SELECT cursor FROM t WHERE queue IN (?, ?) AND status IN ('pending', 'retrying') AND run_at <= ? LIMIT ?";
        assert_eq!(for_mysql(sql).matches('?').count(), sql.matches('?').count());
    }
}
