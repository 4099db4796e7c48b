//! Cross-process wake-ups (extensions §E2): the [`Notifier`] that sends this handle's
//! `NOTIFY` after its commits, and the listener task that turns other handles' notifications
//! into in-process wake-ups, re-listening by itself after its connection drops.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgPool};
use taskgate_sql::SqlBroker;
use tokio::sync::mpsc;

/// The least time between two notifications of one handle.
pub(crate) const MIN_GAP: Duration = Duration::from_millis(5);

/// Sends one `NOTIFY` per burst of commits: pokes while a notification is in flight, or within
/// [`MIN_GAP`] of the last one, are coalesced into the next one. So a handle runs at most one notifying
/// transaction at a time and at most one per `MIN_GAP` under load (PostgreSQL serialises
/// notifying commits cluster-wide), while an idle system still notifies at once.
#[derive(Clone, Debug)]
pub(crate) struct Notifier {
    tx: mpsc::Sender<()>,
    /// When this handle's last notification was sent or handed to a statement: the one gap
    /// both the sender task and [`Notifier::inline`] keep.
    last: Arc<Mutex<Option<Instant>>>,
    /// `pg_notify('<channel>', '<tag>')`, for a statement to carry ([`Notifier::inline`]).
    expr: Arc<str>,
}

/// Takes the next notification slot at `now` if [`MIN_GAP`] has passed since the last one;
/// else how long is left.
fn take_slot(last: &Mutex<Option<Instant>>, now: Instant) -> Result<(), Duration> {
    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
    let left =
        last.map_or(Duration::ZERO, |at| MIN_GAP.saturating_sub(now.saturating_duration_since(at)));
    if !left.is_zero() {
        return Err(left);
    }
    *last = Some(now);
    Ok(())
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
        let last = Arc::new(Mutex::new(None));
        let task_last = last.clone();
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                if pool.is_closed() {
                    break;
                }
                // Pokes that arrive while this waits out the gap wait in the channel (one
                // place): they are coalesced into the next notification.
                while let Err(left) = take_slot(&task_last, Instant::now()) {
                    tokio::time::sleep(left).await;
                }
                let _ = sqlx::raw_sql(&sql).execute(&pool).await;
            }
        });
        Notifier { tx, last, expr: format!("pg_notify('{channel}', '{tag}')").into() }
    }

    /// Asks for a notification after a commit.
    pub(crate) fn poke(&self) {
        let _ = self.tx.try_send(());
    }

    /// The `pg_notify` expression for a statement to carry, when this handle is idle: no
    /// notification asked of the sender, and none sent or handed out within [`MIN_GAP`]. The
    /// notification then goes out with the statement's COMMIT, one round trip before the
    /// sender's would (a cross-process pickup on an idle system). Under load the sender's
    /// coalescing stays in charge, so notifying commits — which PostgreSQL serialises
    /// cluster-wide — stay at most one per gap per handle.
    pub(crate) fn inline(&self) -> Option<String> {
        self.inline_at(Instant::now())
    }

    /// [`Notifier::inline`] at `now`.
    fn inline_at(&self, now: Instant) -> Option<String> {
        if self.tx.capacity() < self.tx.max_capacity() {
            return None;
        }
        take_slot(&self.last, now).ok()?;
        Some(self.expr.to_string())
    }
}

/// Longest pause between two attempts to re-establish the listener.
const MAX_RELISTEN_DELAY: Duration = Duration::from_secs(1);

/// The listener task: LISTEN on `channel` over the dedicated `pool` (one connection) and wake
/// `broker`'s waiters on every notification not sent by this handle (`tag`). After a lost
/// connection it wakes the waiters (a notification may have been missed) and listens again.
/// Ends when `pool` is closed — at once, even in the middle of a connection attempt: the
/// pool's `close` waits for every connection attempt it has started, and one retrying a
/// refused or silent server would hold it for the pool's acquire timeout.
pub(crate) async fn listen(broker: SqlBroker, pool: PgPool, channel: String, tag: String) {
    let mut delay = Duration::from_millis(10);
    loop {
        let closed = pool.close_event();
        let attempt = listen_once(&broker, &pool, &channel, &tag, &mut delay);
        let outcome = tokio::select! {
            outcome = attempt => outcome,
            () = closed => return,
        };
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use sqlx::postgres::PgPoolOptions;

    use super::{Notifier, MIN_GAP};

    /// A notifier whose pool never connects (nothing here sends).
    fn notifier() -> Notifier {
        let pool = PgPoolOptions::new()
            .connect_lazy("postgres://nobody@127.0.0.1:1/none")
            .unwrap_or_else(|e| panic!("lazy pool: {e}"));
        Notifier::spawn(pool, "chan", "tag")
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_idle_handle_hands_out_one_inline_notify_per_gap() {
        let n = notifier();
        let t0 = Instant::now();
        assert_eq!(n.inline_at(t0).as_deref(), Some("pg_notify('chan', 'tag')"));
        assert_eq!(n.inline_at(t0 + Duration::from_millis(1)), None, "within the gap");
        assert!(n.inline_at(t0 + MIN_GAP).is_some(), "a gap later");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_pending_notification_keeps_statements_from_carrying_one() {
        let n = notifier();
        // On a current-thread runtime the sender task has not run yet: the poke is pending.
        n.poke();
        assert_eq!(n.inline_at(Instant::now() + Duration::from_secs(1)), None);
    }
}
