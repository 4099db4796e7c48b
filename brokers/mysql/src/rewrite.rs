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
//! Both are pure text substitutions with the same number and order of `?` placeholders, so the
//! bound arguments are untouched. The EXPLAIN test checks the statements the broker really
//! runs, so a change of the engine's text that bypasses rewrite 2 fails a test instead of
//! silently slowing claims. A dialect hook in the engine would make this module unnecessary.

use std::borrow::Cow;

/// The status half of the ready predicate, exactly as the engine writes it.
const READY_STATUSES: &str = " AND status IN ('pending', 'retrying')";

/// Applies both rewrites; borrows when nothing changes (the common case).
pub(crate) fn for_mysql(sql: &str) -> Cow<'_, str> {
    let quoted = quote_cursor(sql);
    match ready_predicate(&quoted) {
        Some(rewritten) => Cow::Owned(rewritten),
        None => quoted,
    }
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
                out.push_str(&head[..q]);
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
        let sql = "SELECT id FROM t WHERE queue = ? AND status IN ('pending', 'retrying') \
                   AND run_at <= ? AND queue NOT IN (SELECT queue FROM p) ORDER BY run_at, id";
        assert_eq!(
            for_mysql(sql),
            "SELECT id FROM t WHERE ready_queue = ? AND status IN ('pending', 'retrying') \
             AND run_at <= ? AND queue NOT IN (SELECT queue FROM p) ORDER BY run_at, id"
                .replace(" AND status IN ('pending', 'retrying')", "")
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
    fn placeholders_keep_their_count() {
        let sql = "SELECT cursor FROM t WHERE queue IN (?, ?) AND status IN ('pending', 'retrying') AND run_at <= ? LIMIT ?";
        assert_eq!(for_mysql(sql).matches('?').count(), sql.matches('?').count());
    }
}
