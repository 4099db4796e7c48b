//! [`Capabilities`]: what a backend supports beyond the core contract, declared by the backend
//! (`Broker::capabilities`) instead of discovered by calling and failing.

/// What a broker supports beyond the core contract. Every backend declares its own; runtimes and
/// tools read it to choose a path (poll or wait for notifications, offer quota or not) and test
/// suites to report an unsupported group as such.
///
/// New capabilities may be added (the struct is `#[non_exhaustive]`): build one from
/// [`Capabilities::NONE`] with the `with_*` methods.
///
/// ```
/// use taskgate::Capabilities;
///
/// let caps = Capabilities::NONE.with_quota(true).with_durable(true);
/// assert!(caps.quota && caps.durable && !caps.shared_storage);
/// assert_eq!(Capabilities::default(), Capabilities::NONE);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Capabilities {
    /// Periodic quota (contract §9): [`Broker::quota_provider`](crate::Broker::quota_provider)
    /// returns a provider.
    pub quota: bool,
    /// Enqueue inside the caller's own database transaction (`enqueue_in` on the backend's
    /// type, extensions §E15).
    pub transactional_enqueue: bool,
    /// Writes made by other processes wake this handle's waiting claimers at once (PostgreSQL
    /// `LISTEN/NOTIFY`); without it they find such work by polling.
    pub cross_process_wakeups: bool,
    /// Several processes (or machines) can open the same storage and share its tasks.
    pub shared_storage: bool,
    /// Stored tasks survive the process (and, with the database's settings, a crash).
    pub durable: bool,
    /// Without an injected clock, time is the database server's: every handle on every
    /// machine judges leases and delays by one clock, and
    /// [`Broker::now`](crate::Broker::now) asks the server.
    pub server_clock: bool,
    /// Audited operator mutations (extensions §E13):
    /// [`Broker::audited`](crate::Broker::audited) writes each action's
    /// [`AuditRecord`](crate::AuditRecord) in the task storage, in the same atomic unit as the
    /// change, and [`Broker::audit_log`](crate::Broker::audit_log) reads them back.
    pub audit: bool,
}

impl Capabilities {
    /// Nothing beyond the core contract.
    pub const NONE: Capabilities = Capabilities {
        quota: false,
        transactional_enqueue: false,
        cross_process_wakeups: false,
        shared_storage: false,
        durable: false,
        server_clock: false,
        audit: false,
    };

    /// Sets [`Capabilities::quota`].
    pub const fn with_quota(mut self, on: bool) -> Self {
        self.quota = on;
        self
    }

    /// Sets [`Capabilities::transactional_enqueue`].
    pub const fn with_transactional_enqueue(mut self, on: bool) -> Self {
        self.transactional_enqueue = on;
        self
    }

    /// Sets [`Capabilities::cross_process_wakeups`].
    pub const fn with_cross_process_wakeups(mut self, on: bool) -> Self {
        self.cross_process_wakeups = on;
        self
    }

    /// Sets [`Capabilities::shared_storage`].
    pub const fn with_shared_storage(mut self, on: bool) -> Self {
        self.shared_storage = on;
        self
    }

    /// Sets [`Capabilities::durable`].
    pub const fn with_durable(mut self, on: bool) -> Self {
        self.durable = on;
        self
    }

    /// Sets [`Capabilities::audit`].
    pub const fn with_audit(mut self, on: bool) -> Self {
        self.audit = on;
        self
    }

    /// Sets [`Capabilities::server_clock`].
    pub const fn with_server_clock(mut self, on: bool) -> Self {
        self.server_clock = on;
        self
    }
}
