//! Fast fills: a backlog of ready no-op tasks, or retained finished rows, written with one
//! bulk `INSERT … SELECT` that copies a task the broker itself enqueued (every column as the
//! broker wrote it; only the ID, queue and the status fields differ). Memory has no SQL, so
//! its backlog goes through `enqueue_many`.

use taskgate::{Broker, Task};

use crate::backend::{Backend, Bed, RawPool};
use crate::Result;

/// The task type of every benchmark task.
pub const TASK_TYPE: &str = "noop";

/// How copied rows differ from the template.
#[derive(Clone, Debug)]
struct Copy {
    queue: String,
    /// `None`: keep the template's (pending) state; `Some(t)`: completed, finished at `t` ms.
    finished_at: Option<i64>,
}

/// Adds `n` ready tasks to `queue`.
pub async fn backlog(bed: &Bed, queue: &str, n: u64) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    if bed.backend == Backend::Memory {
        return enqueue_chunks(&*bed.broker, queue, n).await;
    }
    // The template waits in a queue nobody claims from: copied while a claimer held it (a
    // claim still in flight from an earlier runtime), the copies would be born `running`.
    let template = bed.broker.enqueue(&Task::new(TASK_TYPE, format!("{queue}_template"))).await?;
    let copy = Copy { queue: queue.to_owned(), finished_at: None };
    replicate(bed, &template.id, n, &copy).await
}

/// Adds `n` completed tasks (finished an hour before the template was made) to queue
/// `retained`, which no claimer watches: the degradation scenario's dead weight.
pub async fn finished(bed: &Bed, n: u64) -> Result<()> {
    let template = bed.broker.enqueue(&Task::new(TASK_TYPE, "retained")).await?;
    let at = template.created_at.as_millis() - 3_600_000;
    let copy = Copy { queue: "retained".to_owned(), finished_at: Some(at) };
    replicate(bed, &template.id, n, &copy).await
}

/// Refreshes the planner's statistics of the tasks table, as PostgreSQL's autovacuum, MySQL's
/// persistent statistics or the SQLite broker's periodic `optimize` would after a big change.
pub async fn refresh_statistics(bed: &Bed) -> Result<()> {
    let table = bed.tasks_table();
    match &bed.raw {
        RawPool::Postgres(pool) => {
            sqlx::query(&format!("ANALYZE {table}")).execute(pool).await?;
        }
        RawPool::MySql(pool) => {
            sqlx::query(&format!("ANALYZE TABLE {table}")).execute(pool).await?;
        }
        RawPool::Sqlite(pool) => {
            sqlx::query("PRAGMA analysis_limit = 400").execute(pool).await?;
            sqlx::query("ANALYZE").execute(pool).await?;
        }
        RawPool::None => {}
    }
    Ok(())
}

async fn enqueue_chunks(broker: &dyn Broker, queue: &str, n: u64) -> Result<()> {
    let mut left = n;
    while left > 0 {
        let take = left.min(1_000);
        let tasks: Vec<Task> = (0..take).map(|_| Task::new(TASK_TYPE, queue)).collect();
        broker.enqueue_many(&tasks).await?;
        left -= take;
    }
    Ok(())
}

/// The SQL dialect of a bed, for the few expressions that differ.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Sqlite,
    Postgres,
    MySql,
}

impl Dialect {
    fn of(bed: &Bed) -> Result<Dialect> {
        match bed.backend {
            Backend::Sqlite => Ok(Dialect::Sqlite),
            Backend::Postgres => Ok(Dialect::Postgres),
            Backend::MySql => Ok(Dialect::MySql),
            Backend::Memory => Err("the memory backend has no SQL".into()),
        }
    }

    /// `literal` followed by `n` zero-padded to 10 digits, as text.
    fn id_expr(self, literal: &str, n: &str) -> String {
        match self {
            Dialect::Postgres => format!("'{literal}' || lpad(({n})::text, 10, '0')"),
            Dialect::MySql => format!("CONCAT('{literal}', LPAD({n}, 10, '0'))"),
            Dialect::Sqlite => format!("'{literal}' || substr('0000000000' || ({n}), -10, 10)"),
        }
    }

    fn column_sql(self) -> &'static str {
        match self {
            Dialect::Postgres => {
                "SELECT column_name::text FROM information_schema.columns WHERE table_schema = \
                 current_schema() AND table_name = $1 ORDER BY ordinal_position"
            }
            Dialect::MySql => {
                "SELECT CAST(column_name AS CHAR) FROM information_schema.columns WHERE \
                 table_schema = DATABASE() AND table_name = ? AND extra NOT LIKE '%GENERATED%' \
                 ORDER BY ordinal_position"
            }
            Dialect::Sqlite => "SELECT name FROM pragma_table_info(?1) ORDER BY cid",
        }
    }
}

/// Copies the template row `n` times with fresh IDs, in one statement.
async fn replicate(bed: &Bed, template: &str, n: u64, copy: &Copy) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    check_literal(template)?;
    check_literal(&copy.queue)?;
    let dialect = Dialect::of(bed)?;
    let columns = columns(bed, dialect).await?;
    let sql = replicate_sql(bed, dialect, &columns, template, n, copy);
    match &bed.raw {
        RawPool::Sqlite(pool) => {
            sqlx::query(&sql).execute(pool).await?;
        }
        RawPool::Postgres(pool) => {
            sqlx::query(&sql).execute(pool).await?;
        }
        RawPool::MySql(pool) => {
            sqlx::query(&sql).execute(pool).await?;
        }
        RawPool::None => return Err("no SQL pool".into()),
    }
    Ok(())
}

/// Literals spliced into fill statements are IDs and queue names this harness made; refuse
/// anything else.
fn check_literal(s: &str) -> Result<()> {
    if s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        Ok(())
    } else {
        Err(format!("refusing to splice {s:?} into SQL").into())
    }
}

async fn columns(bed: &Bed, dialect: Dialect) -> Result<Vec<String>> {
    let table = bed.tasks_table();
    let sql = dialect.column_sql();
    let cols: Vec<String> = match &bed.raw {
        RawPool::Sqlite(p) => sqlx::query_scalar(sql).bind(&table).fetch_all(p).await?,
        RawPool::Postgres(p) => sqlx::query_scalar(sql).bind(&table).fetch_all(p).await?,
        RawPool::MySql(p) => {
            // utf8mb4_bin strings arrive as VARBINARY.
            let raw: Vec<Vec<u8>> = sqlx::query_scalar(sql).bind(&table).fetch_all(p).await?;
            raw.into_iter().map(String::from_utf8).collect::<std::result::Result<_, _>>()?
        }
        RawPool::None => Vec::new(),
    };
    if cols.is_empty() {
        return Err(format!("no columns found for {table}").into());
    }
    Ok(cols)
}

/// `SELECT x FROM (digits) d0, … ` producing 0..10^k-1, with `n` the expression of the number.
fn numbers(n: u64) -> (String, String) {
    let mut k = 1;
    while 10u64.pow(k) < n {
        k += 1;
    }
    let digits = "(SELECT 0 AS x UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    // Highest digit first, so a nested-loop join counts up: rows go in in ID order, as a real
    // backlog (time-ordered ULIDs) does. A scattered order fragments SQLite's and InnoDB's
    // B-trees and PostgreSQL's heap, and claims of consecutive IDs then touch a page per row
    // (SQLite raw claim+ack at batch 100 ran ~7x slower).
    let from: Vec<String> = (0..k).rev().map(|i| format!("{digits} d{i}")).collect();
    let expr: Vec<String> = (0..k).map(|i| format!("d{i}.x * {}", 10u64.pow(i))).collect();
    (from.join(", "), format!("({})", expr.join(" + ")))
}

fn replicate_sql(
    bed: &Bed,
    dialect: Dialect,
    columns: &[String],
    template: &str,
    n: u64,
    copy: &Copy,
) -> String {
    let (from, num) = numbers(n);
    let id_literal = taskgate::id::new_ulid()[..14].to_owned();
    let select: Vec<String> =
        columns.iter().map(|c| column_value(dialect, c, &id_literal, &num, copy)).collect();
    let table = bed.tasks_table();
    let quoted: Vec<String> = columns.iter().map(|c| quote(dialect, c)).collect();
    format!(
        "INSERT INTO {table} ({}) SELECT {} FROM {table} t, {from} WHERE t.id = '{template}' \
         AND {num} < {n} ORDER BY {num}",
        quoted.join(", "),
        select.join(", "),
    )
}

fn quote(dialect: Dialect, column: &str) -> String {
    match dialect {
        Dialect::MySql => format!("`{column}`"),
        _ => format!("\"{column}\""),
    }
}

fn column_value(
    dialect: Dialect,
    column: &str,
    id_literal: &str,
    num: &str,
    copy: &Copy,
) -> String {
    let done = copy.finished_at;
    match (column, done) {
        ("id", _) => dialect.id_expr(id_literal, num),
        ("queue", _) => format!("'{}'", copy.queue),
        ("status", Some(_)) => "'completed'".to_owned(),
        ("finished_at" | "started_at", Some(at)) => at.to_string(),
        ("result", Some(_)) => "NULL".to_owned(),
        _ => format!("t.{}", quote(dialect, column)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_cover_the_count_with_few_digits() {
        let (from, expr) = numbers(1_000);
        assert_eq!(from.matches(" d").count(), 3, "{from}");
        assert!(expr.contains("d2.x * 100"), "{expr}");
        let (from, _) = numbers(1_001);
        assert_eq!(from.matches(" d").count(), 4);
    }

    #[test]
    fn only_harness_literals_are_spliced() {
        assert!(check_literal("01ARZ3NDEKTSV4RRFFQ69G5FAV").is_ok());
        assert!(check_literal("q7").is_ok());
        assert!(check_literal("x'; DROP TABLE t; --").is_err());
    }
}
