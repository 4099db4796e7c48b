//! Model-based tests (extensions §E12): a small, pure reference model of the broker contract,
//! a `proptest-state-machine` test that checks any backend against it step by step, and a
//! concurrency checker that judges recorded histories (no model).
//!
//! # The model
//!
//! [`Model`] is plain data and plain functions: a map of tasks (each the visible [`Task`]
//! record plus the contract's internal fields — lease deadline, `pending_parents`, one
//! `(parent, done)` edge per distinct parent, the lease tokens it was issued), the paused
//! queues and a millisecond clock. No async, no locks, no I/O, and **no code shared with any
//! backend** — a model that reused the memory backend would prove nothing. It reuses exactly
//! two pure functions of the core, because the specification defines them as the contract
//! itself: [`taskgate::transition`] (the status table, §2.1; every model status write goes
//! through it) and [`taskgate::decide::submit_decision`] (§5.1; used at enqueue, resume and
//! defensive repair). Everything else — failure kinds and caps (§4), propagation (§5.3), the
//! reaper's steps (§6), replay and resume checks (§8.3, §E5), steps (§E3), pause (§E4),
//! batches (§E8), retention (§E16), list order, counts and queue lengths (§7) — is written
//! here again from the text.
//!
//! What the model encodes, beyond the spec's explicit rules (where the spec is silent; each is
//! a decision the backends are held to):
//!
//! * **IDs and order.** Tests use readable preset IDs (`t1`…`t6`); a generated ID gets the
//!   model name `g1`, `g2`, … and sorts before every preset ID, in creation order (generated
//!   IDs are monotonic ULIDs, which start with a digit; presets start with a lowercase letter).
//!   Lease tokens are named `<task>#<n>`. The test maps both to the backend's real values.
//! * **Propagation order.** Children of one parent are visited in ID order (§5.3 states it
//!   for SQL; every backend must agree, because it decides which parent a cascade-cancelled
//!   child names in `last_error` when two of its parents are cancelled in one unit). The
//!   reaper walks its candidates in ID order, step 0 before step 1, re-reading each task when
//!   it reaches it; repair walks blocked tasks in ID order.
//! * **`cancel_requested` after a terminal write.** Every terminal write clears it: ack,
//!   fail→failed, finish_canceled, the reaper, and also cancel of a `retrying` task that
//!   carries a request from an earlier run, and propagation/repair cancels.
//! * **Checks before lookups.** `save_step` validates its step (delay ≤ 60 s, progress ≤
//!   100) before the token check; `try_dequeue_many` validates the queue list, then `max`.
//! * **save_step on a cancel-requested task** stores cursor, progress, message and
//!   `steps + 1`, leaves `attempts` as it was, cancels and returns `Canceled`.
//! * **Batches.** `enqueue_many` behaves like enqueuing its items one after another on a copy
//!   that is kept only if all succeed; the error is the first failing item's (kind compared,
//!   details open). `ack_many` acks its items in order in one unit.
//! * **Replay.** A request with both or neither of ID and key is `InvalidInput`. "Already
//!   replayed" means "some stored execution has `replay_of` = this ID" (the SQL backends
//!   derive it that way).
//! * **Replay chains and prune.** A key-less execution and the executions replaying it form a
//!   replay chain, which prune takes whole or not at all, like a keyed chain (replays share
//!   their target's key, so a keyed chain holds its replays). No stored `replay_of` ever names
//!   a pruned ID, so an ID a replay names is never reused, and prune never lifts a replayed
//!   mark (docs/decisions.md "Retention").
//! * **The chain tail** named by `TaskExists` is the key's execution nobody replays — the
//!   same tail replay-by-key uses — not "the latest by `(created_at, id)`": the two differ
//!   when a preset ID and a generated replay share a millisecond.
//! * **Prune with a limit** may leave the backend a choice; the test then accepts any choice
//!   that takes whole units (a key-less replay chain, or a keyed chain), stays within the
//!   limit and leaves out no unit that would still have fitted, and the model adopts it.
//! * **Defensive repair** recounts `pending_parents` *and* re-arms the task's edges (done
//!   exactly for the parents that are terminal). §5.4 only says "rewrite pending_parents";
//!   without re-arming, a parent counted again (because it was resumed) could never decrement
//!   the count, and the child would stay blocked until a later reap.
//!
//! # The model test
//!
//! [`run_model_test`] (the generated `model` test, [`model_suite_test`](crate::model_suite_test),
//! panics with its report) runs `cases` random
//! sequences of up to 40 steps (`TASKGATE_MODEL_STEPS`): enqueue with and without parents,
//! keys, delays and retries; enqueue_many; try_dequeue_many, try_dequeue and the blocking
//! dequeue; ack and ack_many; fail of each kind; cancel; finish_canceled; requeue; heartbeat;
//! save_step; pause and resume of queues; resume; replay; prune; reap; clock advances; get and
//! filtered list — with current, stale, empty and bogus tokens. Each case gets fresh storage
//! from the factory and a manual clock at 2026-01-01. After every step the test compares the
//! call's result (value or error kind, with the contractual details) and then everything
//! observable: every task with every field, in list order; Counts; QueueLen of every queue;
//! the paused queues. A divergence shrinks to a minimal sequence printed one step per line,
//! with the seed to rerun it (`TASKGATE_MODEL_SEED`); [`check_sequence`] replays one fixed
//! sequence, so a shrunk failure becomes a regression test ([`regressions`] holds the ones
//! found so far; [`check_regressions`] replays them all). The case count comes from
//! `TASKGATE_MODEL_CASES` when set; `TASKGATE_MODEL_STATS=1` prints how often each kind of
//! step ended how. The seed is printed when the run starts and again in every failure report.
//!
//! Deadlines: every backend call of a step has 30 s, setup and teardown of a case
//! [`WAIT_LIMIT`](crate::WAIT_LIMIT) each, and a divergence names the step and the call that
//! hung. The whole run has 10 min plus 10 s per case plus the shrink limit, watched by a thread
//! that, past it, prints the case and step the run was at and ends the test process (it fires
//! even when every runtime thread is blocked).
//!
//! # What it has caught
//!
//! Three bugs planted on purpose in a scratch copy of the memory backend, each caught within
//! the default 256 cases (the case number that first failed, worst of several seeds):
//! `requeue` that bumps `attempts` (case 37), a reaper that compares lease deadlines with `<=`
//! (case 69), a cascade cancel that stops after one level (case 125). Real divergences
//! it found in the SQL engine are kept in [`regressions`], each with what it pinned down.
//!
//! # The history checker
//!
//! [`run_history_check`] drives several broker handles on one storage concurrently and checks
//! the recorded history; see [`history`] (its calls, rounds and run are bounded the same way).

mod call;
mod cascade;
mod check;
mod exec;
mod gen;
pub mod history;
mod identity;
mod op;
mod regress;
mod run;
mod show;
mod state;
mod write;

pub use call::{brief, Call, Detail, Fault, Outcome};
pub use gen::ContractMachine;
pub use history::{run_history_check, HistoryConfig, HistoryFailure, HistoryReport};
pub use op::{
    ListSpec, Op, ReplayTarget, StepSpec, TaskSpec, TokenRef, KEYS, PRESET_IDS, QUEUES, TYPES,
};
pub use regress::{check_regressions, regressions, Regression};
pub(crate) use run::reachable;
pub use run::{
    check_sequence, model_cases, run_model_test, ModelFailure, ModelReport, CASES_VAR, SEED_VAR,
    SHRINK_VAR, STEPS_VAR,
};
pub use state::{Model, ModelOptions};

#[cfg(doc)]
use taskgate::Task;
