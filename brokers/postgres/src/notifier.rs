//! Cross-process wake-ups (extensions §E2): the [`Notifier`] that sends this handle's
//! `NOTIFY` after its commits, and the listener task that turns other handles' notifications
//! into in-process wake-ups, re-listening by itself after its connection drops.

use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use taskgate_sql::SqlBroker;
use tokio::sync::mpsc;

/// The least time between two notifications of one handle.
pub(crate) const MIN_GAP: Duration = Duration::from_millis(5);

/// Sends one `NOTIFY` per burst of commits: pokes while a notification is in flight, or within
/// [`MIN_GAP`] after it, are coalesced into the next one. So a handle runs at most one notifying
/// transaction at a time and at most one per `MIN_GAP` under load (PostgreSQL serialises
/// notifying commits cluster-wide), while an idle system still notifies at once.
#[derive(Clone, Debug)]
pub(crate) struct Notifier {
    tx: mpsc::Sender<()>,
}

impl Notifier {
    /// Starts the sender task for `channel` with payload `tag`. Both are plain SQL-safe words
    /// (a validated prefix, a hex tag). The task ends when every `Notifier` is dropped or the
    /// pool is closed.
    pub(crate) fn spawn(pool: PgPool, channel: &str, tag: &str) -> Notifier {
        let (tx, mut rx) = mpsc::channel::<()>(1);
        // Losing a notification in a crash is harmless (polling is the net), so it does not
        // wait for the WAL flush.
        let sql =
            format!("SET LOCAL synchronous_commit TO off; SELECT pg_notify('{channel}', '{tag}')");
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                if pool.is_closed() {
                    break;
                }
                let _ = sqlx::raw_sql(&sql).execute(&pool).await;
                tokio::time::sleep(MIN_GAP).await;
            }
        });
        Notifier { tx }
    }

    /// Asks for a notification after a commit.
    pub(crate) fn poke(&self) {
        let _ = self.tx.try_send(());
    }
}

/// Longest pause between two attempts to re-establish the listener.
const MAX_RELISTEN_DELAY: Duration = Duration::from_secs(1);

/// The listener task: LISTEN on `channel` over the dedicated `pool` (one connection) and wake
/// `broker`'s waiters on every notification not sent by this handle (`tag`). After a lost
/// connection it wakes the waiters (a notification may have been missed) and listens again.
/// Ends when `pool` is closed.
pub(crate) async fn listen(broker: SqlBroker, pool: PgPool, channel: String, tag: String) {
    let mut delay = Duration::from_millis(10);
    loop {
        let outcome = listen_once(&broker, &pool, &channel, &tag, &mut delay).await;
        if pool.is_closed() || matches!(outcome, Err(sqlx::Error::PoolClosed)) {
            return;
        }
        broker.wake_waiters();
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RELISTEN_DELAY);
    }
}

async fn listen_once(
    broker: &SqlBroker,
    pool: &PgPool,
    channel: &str,
    tag: &str,
    delay: &mut Duration,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    *delay = Duration::from_millis(10);
    // Anything committed while we were not listening is found by one probe.
    broker.wake_waiters();
    loop {
        match listener.try_recv().await? {
            Some(n) if n.payload() == tag => {}
            // A foreign notification, or `None`: the connection was lost and re-established
            // (re-listening), so a notification may have been missed.
            _ => broker.wake_waiters(),
        }
    }
}
