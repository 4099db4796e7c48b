//! Broker options (contract §3.2) and their defaults, resolved once at `init`.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::notify::{Notifier, NotifyFn};
use crate::validate::{Limits, DEFAULT_MAX_PAYLOAD_BYTES};
use crate::{Clock, SystemClock};

/// Default lease TTL for queues without their own.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);
/// Default reap cap: the third expiry fails the task.
pub const DEFAULT_LEASE_LOST_MAX: u32 = 3;
/// Default throttle cap.
pub const DEFAULT_THROTTLED_MAX: u32 = 100;

/// What [`Broker::init`](crate::Broker::init) configures. Zero values take the defaults.
#[derive(Clone, Default)]
pub struct BrokerOptions {
    /// Per-queue lease TTL; a missing or zero entry uses `default_lease_ttl`.
    pub lease_ttl: HashMap<String, Duration>,
    /// Lease TTL for other queues; zero means 60 s.
    pub default_lease_ttl: Duration,
    /// Lease expiries that fail a task; zero means 3.
    pub lease_lost_max: u32,
    /// Throttled failures that fail a task; zero means 100.
    pub throttled_max: u32,
    /// State-change observer (contract §3.5): called asynchronously with snapshots, outside
    /// every lock, each call protected against panics. For metrics, never for side effects.
    pub notify: Option<NotifyFn>,
    /// The clock; `None` means the local clock (memory, SQLite) or the database server's
    /// clock (PostgreSQL, MySQL). An injected clock overrides server time everywhere.
    pub clock: Option<Arc<dyn Clock>>,
    /// The machine's own clock, where a broker needs local time: waiting for a delayed task,
    /// and every time of a backend whose clock is local (memory, SQLite) when no `clock` is
    /// injected. `None` means the system clock. Unlike `clock` it never overrides a database
    /// server's time: a handle whose local clock is off (a skewed machine, or a test that
    /// skews it on purpose) still judges leases, delays and quota windows by the server.
    pub local_clock: Option<Arc<dyn Clock>>,
    /// Largest payload, result or cursor in bytes; zero means 16 MiB. A backend whose storage
    /// holds less lowers it at `init` ([`Broker::limits`](crate::Broker::limits) reports the
    /// limit in force).
    pub max_payload_bytes: usize,
}

impl BrokerOptions {
    /// Options with every default.
    pub fn new() -> Self {
        BrokerOptions::default()
    }

    /// Injects a clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets the local clock (see [`BrokerOptions::local_clock`]).
    pub fn with_local_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.local_clock = Some(clock);
        self
    }

    /// Installs a state-change observer.
    pub fn with_notify(mut self, notify: impl Fn(&crate::Task) + Send + Sync + 'static) -> Self {
        self.notify = Some(Arc::new(notify));
        self
    }

    /// Sets the lease TTL of one queue.
    pub fn with_lease_ttl(mut self, queue: impl Into<String>, ttl: Duration) -> Self {
        self.lease_ttl.insert(queue.into(), ttl);
        self
    }

    /// Applies the defaults.
    pub fn resolve(self) -> ResolvedOptions {
        let default_lease_ttl = non_zero(self.default_lease_ttl, DEFAULT_LEASE_TTL);
        let lease_ttl = self.lease_ttl.into_iter().filter(|(_, ttl)| !ttl.is_zero()).collect();
        ResolvedOptions {
            lease_ttl,
            default_lease_ttl,
            lease_lost_max: if self.lease_lost_max == 0 {
                DEFAULT_LEASE_LOST_MAX
            } else {
                self.lease_lost_max
            },
            throttled_max: if self.throttled_max == 0 {
                DEFAULT_THROTTLED_MAX
            } else {
                self.throttled_max
            },
            notifier: Notifier::new(self.notify),
            clock: match (&self.clock, self.local_clock) {
                (Some(injected), _) => injected.clone(),
                (None, Some(local)) => local,
                (None, None) => Arc::new(SystemClock),
            },
            injected_clock: self.clock,
            limits: Limits::new(if self.max_payload_bytes == 0 {
                DEFAULT_MAX_PAYLOAD_BYTES
            } else {
                self.max_payload_bytes
            }),
        }
    }
}

fn non_zero(d: Duration, default: Duration) -> Duration {
    if d.is_zero() {
        default
    } else {
        d
    }
}

impl fmt::Debug for BrokerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerOptions")
            .field("lease_ttl", &self.lease_ttl)
            .field("default_lease_ttl", &self.default_lease_ttl)
            .field("lease_lost_max", &self.lease_lost_max)
            .field("throttled_max", &self.throttled_max)
            .field("notify", &self.notify.is_some())
            .field("clock", &self.clock)
            .field("local_clock", &self.local_clock)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .finish()
    }
}

/// [`BrokerOptions`] with every default applied; what a broker keeps after `init`.
#[derive(Clone, Debug)]
pub struct ResolvedOptions {
    /// Per-queue lease TTLs (zero entries removed).
    pub lease_ttl: HashMap<String, Duration>,
    /// Lease TTL for other queues.
    pub default_lease_ttl: Duration,
    /// Reap cap.
    pub lease_lost_max: u32,
    /// Throttle cap.
    pub throttled_max: u32,
    /// The state-change observer.
    pub notifier: Notifier,
    /// The clock to read and wait on: the injected one, else the local clock
    /// ([`BrokerOptions::local_clock`], by default the system clock).
    pub clock: Arc<dyn Clock>,
    /// The injected clock, if any: SQL servers use their own time unless this is set.
    pub injected_clock: Option<Arc<dyn Clock>>,
    /// Size limits (a backend may lower them to what its storage holds before keeping them).
    pub limits: Limits,
}

impl ResolvedOptions {
    /// The lease TTL of `queue`.
    pub fn ttl(&self, queue: &str) -> Duration {
        self.lease_ttl.get(queue).copied().unwrap_or(self.default_lease_ttl)
    }
}

impl Default for ResolvedOptions {
    fn default() -> Self {
        BrokerOptions::default().resolve()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_values_take_defaults() {
        let r = BrokerOptions::new().with_lease_ttl("q0", Duration::ZERO).resolve();
        assert_eq!(r.default_lease_ttl, DEFAULT_LEASE_TTL);
        assert_eq!((r.lease_lost_max, r.throttled_max), (3, 100));
        assert_eq!(r.ttl("q0"), DEFAULT_LEASE_TTL);
        assert_eq!(r.limits.max_payload_bytes, 16 * 1024 * 1024);
        assert!(r.injected_clock.is_none());
    }

    #[test]
    fn the_local_clock_is_read_unless_a_clock_is_injected() {
        let local = crate::ManualClock::at_contract_epoch();
        let r = BrokerOptions::new().with_local_clock(Arc::new(local.clone())).resolve();
        assert_eq!(r.clock.now_ms(), local.now_ms());
        assert!(r.injected_clock.is_none(), "a local clock is not an injected one");
        let injected = crate::ManualClock::new(std::time::UNIX_EPOCH);
        let r = BrokerOptions::new()
            .with_local_clock(Arc::new(local))
            .with_clock(Arc::new(injected.clone()))
            .resolve();
        assert_eq!(r.clock.now_ms(), injected.now_ms(), "an injected clock wins");
        assert!(r.injected_clock.is_some());
    }

    #[test]
    fn per_queue_ttl_wins() {
        let r = BrokerOptions::new().with_lease_ttl("slow", Duration::from_secs(600)).resolve();
        assert_eq!(r.ttl("slow"), Duration::from_secs(600));
        assert_eq!(r.ttl("other"), DEFAULT_LEASE_TTL);
    }
}
