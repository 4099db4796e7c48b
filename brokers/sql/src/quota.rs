//! The periodic hard quota (contract §9) on the `<prefix>quota` table: one atomic reserve in the
//! dialect's shape, a best-effort release, and opportunistic cleanup of old windows. Window
//! time is the medium's (the database server's, or SQLite's local clock) unless a clock is
//! injected.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use taskgate::{QuotaConfig, QuotaGate, QuotaProvider, Reservation, Result};

use crate::core::Core;
use crate::dialect::QuotaShape;
use crate::tx::{Tx, TxFail};
use crate::value::Cols;
use crate::{Kind, Value};

/// A quota gate of one key, sharing the broker's connections.
pub(crate) struct SqlQuotaGate {
    core: Arc<Core>,
    key: String,
    period: i64,
    limit: i64,
    last_window: Mutex<Option<i64>>,
}

impl std::fmt::Debug for SqlQuotaGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlQuotaGate")
            .field("key", &self.key)
            .field("period", &self.period)
            .field("limit", &self.limit)
            .finish()
    }
}

/// Builds quota gates for [`QuotaProvider::queue_quota`].
pub(crate) fn quota_gate(
    core: &Arc<Core>,
    queue: &str,
    config: &QuotaConfig,
) -> Result<Arc<dyn QuotaGate>> {
    let (key, period) = config.resolve(queue)?;
    Ok(Arc::new(SqlQuotaGate {
        core: core.clone(),
        key,
        period,
        limit: i64::from(config.limit),
        last_window: Mutex::new(None),
    }))
}

impl SqlQuotaGate {
    /// The medium-time override in unix seconds: the injected clock's, else the local clock's
    /// where the dialect's time is local (SQLite: the machine's), else NULL (the server's).
    fn now_override(&self, opts: &taskgate::ResolvedOptions) -> Value {
        match self.core.local_now(opts) {
            Some(now) => Value::Int(now.as_secs()),
            None => Value::Null(Kind::Int),
        }
    }

    async fn reserve_tx(&self, tx: &mut Tx<'_>) -> std::result::Result<Option<i64>, TxFail> {
        let table = format!("{}quota", self.core.prefix);
        let now = self.now_override(tx.opts);
        match self.core.dialect.quota_shape(&table) {
            QuotaShape::UpsertReturning { sql } => {
                let sql = self.core.sql_sized("quota_upsert", (0, 0), || sql);
                let args = [
                    Value::from(&self.key),
                    now,
                    Value::Int(self.period),
                    Value::Int(self.period),
                    Value::Int(self.period),
                    Value::Int(self.limit),
                ];
                let rows = tx.fetch(&sql, &args, &[Kind::Int]).await?;
                match rows.first() {
                    Some(r) => Ok(Some(Cols(r).int(0)?)),
                    None => Ok(None),
                }
            }
            QuotaShape::EnsureThenUpdate { now_sql, ensure_sql, update_sql } => {
                let now_sql = self.core.sql_sized("quota_now", (0, 0), || now_sql);
                let rows = tx.fetch(&now_sql, &[now], &[Kind::Int]).await?;
                let secs = Cols(rows.first().map(Vec::as_slice).unwrap_or_default()).int(0)?;
                let win = taskgate::window_start(secs, self.period);
                let (key, w) = (Value::from(&self.key), Value::Int(win));
                let ensure = [key.clone(), w.clone(), Value::Int(self.period)];
                let ensure_sql = self.core.sql_sized("quota_ensure", (0, 0), || ensure_sql);
                tx.exec(&ensure_sql, &ensure).await?;
                let update = [key, w, Value::Int(self.limit)];
                let update_sql = self.core.sql_sized("quota_update", (0, 0), || update_sql);
                let n = tx.exec(&update_sql, &update).await?;
                Ok((n == 1).then_some(win))
            }
        }
    }

    /// After a reserve lands in a new window, drops this key's windows older than two periods.
    async fn cleanup(&self, opts: &taskgate::ResolvedOptions, window: i64) {
        let previous = {
            let mut last = self.last_window.lock().unwrap_or_else(|p| p.into_inner());
            last.replace(window)
        };
        if previous.is_none_or(|p| p == window) {
            return;
        }
        let sql = self.core.sql("DELETE FROM {quota} WHERE qkey = ? AND win < ?");
        let args = [Value::from(&self.key), Value::Int(window - 2 * self.period)];
        let _: std::result::Result<u64, TxFail> = self
            .core
            .tx(opts, "quota_cleanup")
            .run(&(&*sql, &args[..]), |tx, &(sql, args)| Box::pin(tx.exec(sql, args)))
            .await;
    }
}

#[async_trait]
impl QuotaGate for SqlQuotaGate {
    async fn reserve(&self) -> Result<Option<Reservation>> {
        let opts = self.core.life.options()?;
        let won = self
            .core
            .tx(&opts, "quota_reserve")
            .run(self, |tx, gate| Box::pin(gate.reserve_tx(tx)))
            .await;
        let window = won.map_err(|e| self.core.fail(e))?;
        if let Some(window) = window {
            self.cleanup(&opts, window).await;
        }
        Ok(window.map(|window| Reservation { window }))
    }

    async fn release(&self, reservation: Reservation) -> Result<()> {
        let opts = self.core.life.options()?;
        let sql = self
            .core
            .sql("UPDATE {quota} SET used = used - 1 WHERE qkey = ? AND win = ? AND used > 0");
        let args = [Value::from(&self.key), Value::Int(reservation.window)];
        let done = (self.core.tx(&opts, "quota_release"))
            .run(&(&*sql, &args[..]), |tx, &(sql, args)| Box::pin(tx.exec(sql, args)))
            .await;
        done.map(|_| ()).map_err(|e| self.core.fail(e))
    }
}

/// The quota capability of a SQL broker.
pub(crate) struct Provider(pub(crate) Arc<Core>);

impl QuotaProvider for Provider {
    fn queue_quota(&self, queue: &str, config: &QuotaConfig) -> Result<Arc<dyn QuotaGate>> {
        quota_gate(&self.0, queue, config)
    }
}
