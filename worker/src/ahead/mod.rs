//! Claiming ahead on a queue with no rate or quota gate: claims feed a small local buffer of
//! claimed-but-unstarted tasks, and a worker that finishes a task starts the next buffered one
//! at once, so handlers do not wait for a claim round trip and one claim carries many tasks.
//!
//! - **How far ahead**: the buffer's target is what the workers can finish in about two claim
//!   round trips (their capacity, workers ÷ the measured time one task keeps a worker busy,
//!   × twice the measured claim time), at most the queue's `prefetch`. Slow handlers therefore
//!   never hoard tasks; no-op handlers claim in batches of hundreds. Capacity, not the observed
//!   finish rate: the observed rate is limited by the feed itself, so where one claim-and-start
//!   cycle outlasts the look-ahead window (a loaded machine) it would keep the target below one
//!   task and the queue claiming one task at a time for good. A claim is made when the buffer
//!   plus the claims in flight fall below the free workers plus that target (with a buffer left:
//!   below half of it, so claims stay large).
//! - **Claims in flight**: feeder 0 waits for work (`dequeue_many`, woken by the broker's
//!   wake-ups); the others claim without waiting (`try_dequeue_many`) only while the last claim
//!   came back full (a backlog), so an idle queue runs one waiting claim, not several.
//! - **Order**: the buffer keeps the claims' `(priority, run_at, id)` order — a landing claim
//!   is merged into it, since two claims in flight can land in either order — and a worker
//!   that stops frees its slot before the next claim is sized, so one worker facing a
//!   backlog claims it in one statement, not two racing ones.
//! - **Leases**: the keeper heartbeats every task held longer than a heartbeat period (TTL/3
//!   on the runtime's clock); a held task found cancelled is finished as cancelled, one whose
//!   lease was lost is dropped (the reaper owns it).
//! - **Cancels**: a held task whose cancel is known never starts: one cancelled through this
//!   runtime's client is taken out of the buffer and finished as cancelled at once
//!   ([`held::cancel_if_held`]), one cancelled elsewhere when the keeper's heartbeat answers
//!   `Canceled` (contract §12.3.6).
//! - **Shutdown**: no held task starts once shutdown began; the held tasks are requeued with
//!   no counter changed (`requeue`), like interrupted ones. A crash leaves them `running` until
//!   their leases expire, like running ones.
//!
//! One concept per file: [`pace`] (how far ahead), [`buffer`] (the held tasks in claim order
//! and the claim sizing), [`feed`] (the feeders' claims), [`pump`] (workers starting held
//! tasks), [`keeper`] (the held tasks' leases) and [`held`] (held tasks that never start:
//! cancelled or returned at shutdown).

pub(crate) mod buffer;
pub(crate) mod feed;
pub(crate) mod held;
pub(crate) mod keeper;
pub(crate) mod pace;
pub(crate) mod pump;

/// Claims in flight at most per queue (one waiting, the others only during a backlog).
pub(crate) const FEEDERS: usize = 2;
