//! One statement-recording [`Adapter`] wrapper for every SQL backend's tests (feature
//! `test-hooks`): query-plan tests `EXPLAIN` exactly the texts and arguments the engine sent,
//! and input tests prove that a refused call ran no statement at all.
//!
//! A backend's options take a [`StatementLog`] (`record_statements(log)`) and wrap the adapter
//! they hand to the engine with [`RecordingAdapter::wrap`]; the test keeps the log.
//!
//! ```
//! use taskgate_sql::StatementLog;
//!
//! let log = StatementLog::new();
//! assert_eq!(log.count(), 0);
//! assert!(log.take().is_empty());
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::{Adapter, DbResult, Kind, Row, Session, SqlConn, Value, WriteTx};

/// The statements a recorded broker ran, with their arguments, in order.
#[derive(Default)]
pub struct StatementLog {
    entries: Mutex<Vec<(String, Vec<Value>)>>,
    count: AtomicU64,
}

impl fmt::Debug for StatementLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatementLog").field("count", &self.count()).finish()
    }
}

impl StatementLog {
    /// An empty log, shared between the test and the adapter that writes to it.
    pub fn new() -> Arc<StatementLog> {
        Arc::new(StatementLog::default())
    }

    fn entries(&self) -> MutexGuard<'_, Vec<(String, Vec<Value>)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, sql: &str, args: &[Value]) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.entries().push((sql.to_owned(), args.to_vec()));
    }

    /// Takes the statements recorded since the last `take`, with their arguments.
    pub fn take(&self) -> Vec<(String, Vec<Value>)> {
        std::mem::take(&mut *self.entries())
    }

    /// The distinct texts recorded since the last [`StatementLog::take`], in first-use order.
    pub fn texts(&self) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for (sql, _) in self.entries().iter() {
            if !seen.contains(sql) {
                seen.push(sql.clone());
            }
        }
        seen
    }

    /// How many statements were recorded since the log was made (`take` does not reset it).
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// An [`Adapter`] that records every statement its write transactions, reads and migration
/// sessions run, then runs it on the wrapped adapter unchanged.
pub struct RecordingAdapter {
    inner: Arc<dyn Adapter>,
    log: Arc<StatementLog>,
}

impl RecordingAdapter {
    /// `inner`, recording into `log`.
    pub fn wrap(inner: Arc<dyn Adapter>, log: Arc<StatementLog>) -> Arc<dyn Adapter> {
        Arc::new(RecordingAdapter { inner, log })
    }
}

#[async_trait]
impl Adapter for RecordingAdapter {
    async fn begin(&self) -> DbResult<Box<dyn WriteTx>> {
        let inner = self.inner.begin().await?;
        Ok(Box::new(Recorded { inner, log: self.log.clone() }))
    }

    async fn read(&self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        self.log.record(sql, args);
        self.inner.read(sql, args, kinds).await
    }

    async fn session(&self) -> DbResult<Box<dyn Session>> {
        let inner = self.inner.session().await?;
        Ok(Box::new(Recorded { inner, log: self.log.clone() }))
    }

    async fn write_one(&self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        self.log.record(sql, args);
        self.inner.write_one(sql, args, kinds).await
    }

    async fn write_one_unless(
        &self,
        sql: &str,
        args: &[Value],
        kinds: &[Kind],
        left: &(dyn Fn() -> bool + Send + Sync),
    ) -> DbResult<Option<Vec<Row>>> {
        let rows = self.inner.write_one_unless(sql, args, kinds, left).await?;
        if rows.is_some() {
            self.log.record(sql, args);
        }
        Ok(rows)
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    fn shares_writer(&self) -> bool {
        self.inner.shares_writer()
    }

    fn inline_notify(&self) -> Option<String> {
        self.inner.inline_notify()
    }

    fn woke(&self) {
        self.inner.woke();
    }

    fn row_locks_are_local(&self) -> bool {
        self.inner.row_locks_are_local()
    }

    async fn statement_limit(&self) -> DbResult<Option<crate::StatementLimit>> {
        self.inner.statement_limit().await
    }
}

/// A write transaction or session whose statements are recorded.
struct Recorded<T: ?Sized> {
    inner: Box<T>,
    log: Arc<StatementLog>,
}

#[async_trait]
impl<T: SqlConn + ?Sized> SqlConn for Recorded<T> {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        self.log.record(sql, args);
        self.inner.execute(sql, args).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        self.log.record(sql, args);
        self.inner.fetch(sql, args, kinds).await
    }

    fn inline_notify(&mut self) -> Option<String> {
        self.inner.inline_notify()
    }
}

#[async_trait]
impl WriteTx for Recorded<dyn WriteTx> {
    async fn commit(self: Box<Self>, woke: bool) -> DbResult<()> {
        self.inner.commit(woke).await
    }

    async fn rollback(self: Box<Self>) -> DbResult<()> {
        self.inner.rollback().await
    }

    fn conn(&mut self) -> &mut dyn SqlConn {
        self
    }
}

#[async_trait]
impl Session for Recorded<dyn Session> {
    async fn begin(&mut self) -> DbResult<()> {
        self.inner.begin().await
    }

    async fn commit(&mut self) -> DbResult<()> {
        self.inner.commit().await
    }

    async fn rollback(&mut self) -> DbResult<()> {
        self.inner.rollback().await
    }

    async fn close(self: Box<Self>) -> DbResult<()> {
        self.inner.close().await
    }

    async fn migration_vars(&mut self) -> DbResult<Vec<(String, String)>> {
        self.inner.migration_vars().await
    }
}
