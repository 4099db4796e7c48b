//! The core of taskgate, a durable task broker with one behavioural contract.
//!
//! This crate holds what every backend shares and does no I/O: the [`Task`] record and its
//! [`Status`] set, the object-safe [`Broker`] trait, the one [`Error`] type, the injected
//! [`Clock`] (with [`ManualClock`] for tests), the transition table ([`transition`]), the pure
//! decisions of enqueue, propagation, failure, reaping, replay and resume ([`decide`]), the
//! back-off curve ([`backoff`]), input limits ([`validate`]), broker options, the quota
//! capability traits, and the wake-up and waiting loop claimers use.
//!
//! Backends live in their own crates (`taskgate-memory`, `taskgate-sqlite`,
//! `taskgate-postgres`, `taskgate-mysql`); `brokertest` proves each one keeps the contract.
//!
//! ```
//! use taskgate::{decide, OnParentFailure, Status};
//!
//! let d = decide::submit_decision([("a", Status::Running), ("b", Status::Failed)],
//!                                 OnParentFailure::FailFast);
//! assert_eq!(d, decide::SubmitDecision::Canceled { last_error: "parent b failed".into() });
//! ```

pub mod audit;
pub mod backoff;
mod broker;
mod capabilities;
mod clock;
pub mod decide;
mod error;
pub mod id;
pub mod notify;
mod options;
mod queues;
mod quota;
mod task;
mod time;
mod transition;
mod tx;
pub mod validate;
pub mod wake;

pub use audit::{AdminAction, AdminOutcome, AuditQuery, AuditRecord};
pub use broker::{
    AckItem, Broker, Counts, FailKind, Failure, Filter, PruneRequest, QueueStats, ReplayRequest,
    RetryAt, Step,
};
pub use capabilities::Capabilities;
pub use clock::{BoxFuture, Clock, ManualClock, SystemClock, Ticker, CONTRACT_EPOCH};
pub use error::{redact_url, BoxError, Error, ErrorKind, ExistingTask, Result};
pub use options::{
    BrokerOptions, ResolvedOptions, DEFAULT_LEASE_LOST_MAX, DEFAULT_LEASE_TTL,
    DEFAULT_THROTTLED_MAX,
};
pub use queues::QueueList;
pub use quota::{window_start, QuotaConfig, QuotaGate, QuotaProvider, Reservation};
pub use task::{
    LeaseState, OnParentFailure, Status, Task, DEFAULT_MAX_RETRY, DEFAULT_PRIORITY, MAX_PRIORITY,
    MIN_PRIORITY,
};
pub use time::{duration_millis, Timestamp};
pub use transition::{is_legal, transition};
pub use tx::{CallerTx, TxEnqueue};
pub use validate::{Limits, StorageBound};
