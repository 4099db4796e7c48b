//! [`Reachability`]: whether an adapter's server can be reached — an unreachable server is
//! reported at once, with the driver's cause.
//!
//! sqlx's pool retries a refused connection with back-off until its acquire timeout (30 s by
//! default) and then reports only "pool timed out", hiding "connection refused". So an adapter
//! takes its pooled connections through a reachability check ([`Reachability::acquire`]):
//!
//! * before the first connection, and after a call found a connection or the server gone, the
//!   check opens one connection of its own (the probe, set up like a pooled one) and returns
//!   the probe's error, whatever it is, instead of waiting for the pool;
//! * while the server is known reachable the check costs an atomic load — unless the pool keeps
//!   a caller waiting while no statement has succeeded for a moment ([`SLOW_ACQUIRE`]): the
//!   pool may be retrying a server that went away since (its idle connections died unseen),
//!   so it probes then, and a probe that cannot reach the server (an I/O error) ends the
//!   wait with its cause. A busy pool keeps its callers waiting as before: its statements keep
//!   succeeding, and a probe the server answers (even with "too many connections") lets the
//!   wait go on.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{DbError, DbResult};

/// How long an acquire may wait, with no statement succeeding meanwhile, before the
/// reachability check makes sure that the server can still be reached.
pub const SLOW_ACQUIRE: Duration = Duration::from_millis(200);

/// Tells an adapter whether its server was reachable lately, and finds out when it does not
/// know (module docs).
#[derive(Debug)]
pub struct Reachability {
    reachable: AtomicBool,
    probing: tokio::sync::Mutex<()>,
    timeout: Duration,
    origin: Instant,
    /// When a statement last succeeded (ms since `origin`).
    last_contact_ms: AtomicU64,
    /// How many probes failed so far ([`Reachability::failed_probes`]).
    failed_probes: AtomicU64,
}

impl Reachability {
    /// A check that knows nothing yet; a probe that takes longer than `timeout` (a server that
    /// never answers) fails with an I/O error (`TimedOut`) naming the wait.
    pub fn new(timeout: Duration) -> Reachability {
        Reachability {
            reachable: AtomicBool::new(false),
            probing: tokio::sync::Mutex::new(()),
            timeout,
            origin: Instant::now(),
            last_contact_ms: AtomicU64::new(0),
            failed_probes: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records that a statement (or a connection) succeeded just now.
    pub fn contact(&self) {
        self.last_contact_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// How long no statement has succeeded.
    fn quiet_for(&self) -> Duration {
        let last = self.last_contact_ms.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }

    /// `Ok` when the server was reachable since the last [`Reachability::lost`]; otherwise runs
    /// `probe` (one at a time per check: concurrent callers wait for it and probe again only if
    /// it failed) and returns its error, or records the server as reachable.
    pub async fn check<F, Fut>(&self, probe: F) -> DbResult<()>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = DbResult<()>>,
    {
        if self.reachable.load(Ordering::Acquire) {
            return Ok(());
        }
        let _one_at_a_time = self.probing.lock().await;
        if self.reachable.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Err(e) = self.within(probe()).await {
            self.failed_probes.fetch_add(1, Ordering::AcqRel);
            return Err(e);
        }
        self.contact();
        self.reachable.store(true, Ordering::Release);
        Ok(())
    }

    /// Runs one connection attempt made outside the pool (the probe, a migration session),
    /// giving up after the check's timeout with an I/O error (`TimedOut`) that names it:
    /// "the server did not answer a connection attempt within 10 s (the connect timeout)".
    pub async fn within<T, Fut>(&self, connect: Fut) -> DbResult<T>
    where
        Fut: Future<Output = DbResult<T>>,
    {
        match tokio::time::timeout(self.timeout, connect).await {
            Ok(result) => result,
            Err(_) => Err(DbError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the server did not answer a connection attempt within {} (the connect \
                     timeout)",
                    human(self.timeout)
                ),
            ))),
        }
    }

    /// How many of the probes have failed. An adapter that retries a call on a fresh
    /// connection after a dead pooled one reads it before each attempt and stops when it grew:
    /// the server cannot be reached, and every further attempt would only wait for another
    /// probe (a silent server: the whole connect timeout each time).
    pub fn failed_probes(&self) -> u64 {
        self.failed_probes.load(Ordering::Acquire)
    }

    /// How long one connection attempt may take before the check gives up on it.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Records that a call found the connection or the server gone: the next
    /// [`Reachability::check`] probes.
    pub fn lost(&self) {
        self.reachable.store(false, Ordering::Release);
    }

    /// Waits for `acquire` (taking a pooled connection, or beginning a transaction on one)
    /// the checked way (module docs): the server checked first, and checked again while the
    /// wait is long and nothing succeeds; a failing check ends the wait with its error. A
    /// failed `acquire` records the server as lost and, when the pool said only that it timed
    /// out, is explained by a probe ([`Reachability::explain`]).
    pub async fn acquire<T, A, P, PFut>(&self, acquire: A, probe: P) -> DbResult<T>
    where
        A: Future<Output = DbResult<T>>,
        P: Fn() -> PFut,
        PFut: Future<Output = DbResult<()>>,
    {
        self.check(&probe).await?;
        tokio::pin!(acquire);
        loop {
            tokio::select! {
                biased;
                got = &mut acquire => {
                    return match got {
                        Ok(value) => {
                            self.contact();
                            Ok(value)
                        }
                        Err(e) => Err(self.explain(e, &probe).await),
                    };
                }
                () = tokio::time::sleep(SLOW_ACQUIRE) => {
                    if self.quiet_for() >= SLOW_ACQUIRE {
                        self.lost();
                        match self.check(&probe).await {
                            Ok(()) => {}
                            // The server cannot be reached: the pool would only time out.
                            Err(e @ DbError::Io(_)) => return Err(e),
                            // It answers (refusing this one: too many connections, …): the
                            // pool may still get one in time, so the wait goes on.
                            Err(_) => {
                                self.contact();
                                self.reachable.store(true, Ordering::Release);
                            }
                        }
                    }
                }
            }
        }
    }

    /// After a pooled acquire failed with `error`: records the server as lost and, when the
    /// pool said only that it timed out, probes for the cause and returns that instead (or
    /// `error` when the probe connects: the pool was busy, not the server gone).
    pub async fn explain<F, Fut>(&self, error: DbError, probe: F) -> DbError
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = DbResult<()>>,
    {
        self.lost();
        if !matches!(error, DbError::PoolTimedOut) {
            return error;
        }
        match self.check(probe).await {
            Ok(()) => error,
            Err(cause) => cause,
        }
    }
}

/// A duration as an operator reads it: whole seconds as `10 s`, anything else as `1500 ms`.
fn human(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn refused() -> DbError {
        DbError::Io(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"))
    }

    #[tokio::test]
    async fn probes_until_reachable_then_only_after_a_loss() {
        let reach = Reachability::new(Duration::from_secs(5));
        let probes = AtomicUsize::new(0);
        let failing = || async {
            probes.fetch_add(1, Ordering::SeqCst);
            Err(refused())
        };
        let e = reach.check(failing).await.err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("refused")));
        let working = || async {
            probes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        assert!(reach.check(working).await.is_ok());
        assert!(reach.check(working).await.is_ok());
        assert_eq!(probes.load(Ordering::SeqCst), 2, "no probe while reachable");
        reach.lost();
        assert!(reach.check(working).await.is_ok());
        assert_eq!(probes.load(Ordering::SeqCst), 3, "a probe after a loss");
    }

    #[tokio::test]
    async fn a_pool_timeout_is_explained_by_the_probe() {
        let reach = Reachability::new(Duration::from_secs(5));
        let explained = reach.explain(DbError::PoolTimedOut, || async { Err(refused()) }).await;
        assert!(explained.to_string().contains("refused"), "{explained}");
        let busy = reach.explain(DbError::PoolTimedOut, || async { Ok(()) }).await;
        assert!(matches!(busy, DbError::PoolTimedOut), "a busy pool stays a pool timeout");
        let other = reach.explain(DbError::RowNotFound, || async { Err(refused()) }).await;
        assert!(matches!(other, DbError::RowNotFound));
    }

    #[tokio::test]
    async fn a_long_wait_with_nothing_succeeding_ends_when_the_probe_fails() {
        let reach = Reachability::new(Duration::from_secs(5));
        assert!(reach.check(|| async { Ok(()) }).await.is_ok(), "reachable at first");
        let waiting =
            reach.acquire(std::future::pending::<DbResult<()>>(), || async { Err(refused()) });
        let e = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(e.is_ok_and(|r| r.is_err_and(|e| e.to_string().contains("refused"))));
        let ok = reach.acquire(async { Ok(7) }, || async { Ok(()) }).await;
        assert_eq!(ok.ok(), Some(7), "reachable again after a probe that connects");
    }

    #[tokio::test]
    async fn a_long_wait_goes_on_while_the_server_answers() {
        let reach = Reachability::new(Duration::from_secs(5));
        assert!(reach.check(|| async { Ok(()) }).await.is_ok());
        let busy = async {
            tokio::time::sleep(SLOW_ACQUIRE * 3).await;
            Ok(1)
        };
        let full = || async { Err(DbError::Protocol("too many connections".into())) };
        assert_eq!(reach.acquire(busy, full).await.ok(), Some(1), "waited through the probe");
    }

    #[tokio::test]
    async fn a_probe_that_never_answers_fails_after_the_timeout() {
        let reach = Reachability::new(Duration::from_millis(10));
        let e = reach.check(std::future::pending::<DbResult<()>>).await;
        let text = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("did not answer a connection attempt within 10 ms"), "{text}");
    }

    #[test]
    fn durations_read_in_seconds_or_milliseconds() {
        assert_eq!(human(Duration::from_secs(10)), "10 s");
        assert_eq!(human(Duration::from_millis(1500)), "1500 ms");
        assert_eq!(human(Duration::from_millis(10)), "10 ms");
    }
}
