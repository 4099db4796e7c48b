//! The pure decisions every backend shares: what enqueue does with a task's parents (contract
//! §5.1), what a child does when a parent finishes (§5.3), how a failure (§4.1) and an expired
//! lease (§6) change a task, and when replay (§8.3) and resume (§E5) are allowed.

use std::collections::HashSet;

use crate::{Error, FailKind, Failure, OnParentFailure, Status, Timestamp};

/// The fixed `last_error` texts (contract §4.3), asserted verbatim by the suite.
pub mod texts {
    use crate::Status;

    /// Cancel of a non-running task, finish_canceled, and the reaper's cancel.
    pub const CANCELED: &str = "canceled";

    /// The throttle cap was reached on the `n`-th throttled failure.
    pub fn throttled(n: u32) -> String {
        format!("throttled {n} times")
    }

    /// The lease cap was reached on the `n`-th expiry.
    pub fn lease_expired(n: u32) -> String {
        format!("lease expired {n} times")
    }

    /// A fail_fast child of a parent that `failed` or was `canceled`.
    pub fn parent_final(parent_id: &str, parent_status: Status) -> String {
        format!("parent {parent_id} {parent_status}")
    }
}

/// The status enqueue gives a new task (contract §5.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitDecision {
    /// No unfinished parent: claimable.
    Pending,
    /// Waiting for `pending_parents` distinct unfinished parents.
    Blocked {
        /// Distinct parents not yet terminal.
        pending_parents: u32,
    },
    /// A fail_fast parent already failed or was cancelled.
    Canceled {
        /// `parent <id> failed` or `parent <id> canceled`, naming the first such parent.
        last_error: String,
    },
}

impl SubmitDecision {
    /// The status this decision stores.
    pub fn status(&self) -> Status {
        match self {
            SubmitDecision::Pending => Status::Pending,
            SubmitDecision::Blocked { .. } => Status::Blocked,
            SubmitDecision::Canceled { .. } => Status::Canceled,
        }
    }

    /// The `pending_parents` counter this decision stores.
    pub fn pending_parents(&self) -> u32 {
        match self {
            SubmitDecision::Blocked { pending_parents } => *pending_parents,
            _ => 0,
        }
    }
}

/// Decides a new task's status from its parents' `(id, status)` in `depends_on` order.
///
/// Duplicates count once. Walking in order, the first failed or cancelled parent cancels a
/// fail_fast child at once (even if others still run); with ignore_parent_failure it counts as
/// satisfied. Otherwise the child is blocked on the parents not yet terminal, or pending.
pub fn submit_decision<'a, I>(parents: I, policy: OnParentFailure) -> SubmitDecision
where
    I: IntoIterator<Item = (&'a str, Status)>,
{
    let mut seen = HashSet::new();
    let mut unfinished: u32 = 0;
    for (id, status) in parents {
        if !seen.insert(id) {
            continue;
        }
        match status {
            Status::Failed | Status::Canceled if policy == OnParentFailure::FailFast => {
                return SubmitDecision::Canceled { last_error: texts::parent_final(id, status) };
            }
            s if !s.is_terminal() => unfinished += 1,
            _ => {}
        }
    }
    if unfinished > 0 {
        SubmitDecision::Blocked { pending_parents: unfinished }
    } else {
        SubmitDecision::Pending
    }
}

/// What propagation does to one direct child of a parent that just finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildAction {
    /// The last unfinished parent finished: `blocked → pending`.
    Wake,
    /// A fail_fast child of a failed or cancelled parent: cancel it (or, if it is running,
    /// only request cancellation).
    Cancel,
    /// Only store the (possibly decremented) counter.
    None,
}

/// Decides a child's fate when one parent reaches `parent` (contract §5.3).
///
/// Returns the child's new `pending_parents` and the action. Never decrements below zero.
pub fn decide_on_parent_final(
    parent: Status,
    child: Status,
    policy: OnParentFailure,
    pending_parents: u32,
) -> (u32, ChildAction) {
    if child.is_terminal() || !parent.is_terminal() {
        return (pending_parents, ChildAction::None);
    }
    if parent == Status::Completed || policy == OnParentFailure::IgnoreParentFailure {
        let left = pending_parents.saturating_sub(1);
        let action = if left == 0 && child == Status::Blocked {
            ChildAction::Wake
        } else {
            ChildAction::None
        };
        return (left, action);
    }
    (pending_parents, ChildAction::Cancel)
}

/// How [`Broker::fail`](crate::Broker::fail) changes a running task (contract §4.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailOutcome {
    /// `retrying` or `failed`.
    pub status: Status,
    /// New business-failure count.
    pub attempts: u32,
    /// New throttle count.
    pub throttled: u32,
    /// New `last_error`.
    pub last_error: String,
    /// New `run_at` when retrying: the failure's [`RetryAt`](crate::RetryAt) resolved
    /// against the broker's `now`.
    pub run_at: Option<Timestamp>,
}

/// Applies a failure to a task with the given counters (contract §4.1).
pub fn fail_outcome(
    attempts: u32,
    max_retry: u32,
    throttled: u32,
    throttled_max: u32,
    failure: &Failure,
    now: Timestamp,
) -> FailOutcome {
    let retry_at = failure.retry.resolve(now);
    let mut out = FailOutcome {
        status: Status::Failed,
        attempts,
        throttled,
        last_error: failure.message.clone(),
        run_at: None,
    };
    let retry = match failure.kind {
        FailKind::Business => {
            out.attempts = attempts.saturating_add(1);
            out.attempts <= max_retry
        }
        FailKind::Throttled => {
            out.throttled = throttled.saturating_add(1);
            if out.throttled >= throttled_max {
                out.last_error = texts::throttled(out.throttled);
            }
            out.throttled < throttled_max
        }
        FailKind::Skip => false,
    };
    if retry {
        out.status = Status::Retrying;
        out.run_at = Some(retry_at);
    }
    out
}

/// What the reaper does with one expired lease (contract §6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReapOutcome {
    /// Cancel was requested: `canceled`, LeaseLost unchanged.
    Canceled,
    /// The lease cap was reached: `failed` with `lease expired N times`.
    Failed {
        /// New lease-lost count.
        lease_lost: u32,
        /// `lease expired N times`.
        last_error: String,
    },
    /// Back to `pending` (immediately claimable).
    Pending {
        /// New lease-lost count.
        lease_lost: u32,
    },
}

/// Decides an expired running task's fate.
pub fn reap_outcome(cancel_requested: bool, lease_lost: u32, lease_lost_max: u32) -> ReapOutcome {
    if cancel_requested {
        return ReapOutcome::Canceled;
    }
    let lease_lost = lease_lost.saturating_add(1);
    if lease_lost >= lease_lost_max {
        ReapOutcome::Failed { lease_lost, last_error: texts::lease_expired(lease_lost) }
    } else {
        ReapOutcome::Pending { lease_lost }
    }
}

/// Checks a replay target in the contract's order (§8.3): not terminal, already replayed,
/// completed without the flag.
pub fn check_replay(
    id: &str,
    status: Status,
    already_replayed: bool,
    allow_completed: bool,
) -> Result<(), Error> {
    if !status.is_terminal() {
        return Err(Error::ReplayNotFinal { id: id.to_owned(), status });
    }
    if already_replayed {
        return Err(Error::AlreadyReplayed { id: id.to_owned() });
    }
    if status == Status::Completed && !allow_completed {
        return Err(Error::CompletedNotAllowed { id: id.to_owned() });
    }
    Ok(())
}

/// Checks an operator resume target (§E5): only `failed` or `canceled`, never replayed.
pub fn check_resume(id: &str, status: Status, already_replayed: bool) -> Result<(), Error> {
    match status {
        Status::Failed | Status::Canceled if already_replayed => {
            Err(Error::AlreadyReplayed { id: id.to_owned() })
        }
        Status::Failed | Status::Canceled => Ok(()),
        other => Err(Error::NotResumable {
            id: id.to_owned(),
            reason: format!("status is {other}; only failed and canceled tasks resume"),
        }),
    }
}

/// The status a resumed task takes from its parents (§E5): the submit decision, except that a
/// fail_fast parent that failed or was cancelled makes the task not resumable.
pub fn resume_decision<'a, I>(
    id: &str,
    parents: I,
    policy: OnParentFailure,
) -> Result<SubmitDecision, Error>
where
    I: IntoIterator<Item = (&'a str, Status)>,
{
    match submit_decision(parents, policy) {
        SubmitDecision::Canceled { last_error } => Err(Error::NotResumable {
            id: id.to_owned(),
            reason: format!("{last_error}; resume the parent first"),
        }),
        decision => Ok(decision),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RetryAt;
    use rstest::rstest;
    use std::time::Duration;
    use OnParentFailure::{FailFast, IgnoreParentFailure};
    use Status::*;

    #[rstest]
    #[case::no_parents(&[], FailFast, SubmitDecision::Pending)]
    #[case::all_completed(&[("a", Completed), ("b", Completed)], FailFast, SubmitDecision::Pending)]
    #[case::one_running(&[("a", Running)], FailFast, SubmitDecision::Blocked { pending_parents: 1 })]
    #[case::pending_and_retrying(&[("a", Pending), ("b", Retrying)], FailFast, SubmitDecision::Blocked { pending_parents: 2 })]
    #[case::blocked_parent_is_unfinished(&[("a", Blocked)], FailFast, SubmitDecision::Blocked { pending_parents: 1 })]
    #[case::running_then_failed(&[("a", Running), ("b", Failed)], FailFast, SubmitDecision::Canceled { last_error: "parent b failed".into() })]
    #[case::canceled_parent(&[("a", Canceled)], FailFast, SubmitDecision::Canceled { last_error: "parent a canceled".into() })]
    #[case::failed_ignored(&[("a", Failed)], IgnoreParentFailure, SubmitDecision::Pending)]
    #[case::failed_ignored_running(&[("a", Failed), ("b", Running)], IgnoreParentFailure, SubmitDecision::Blocked { pending_parents: 1 })]
    #[case::duplicates_count_once(&[("a", Running), ("a", Running)], FailFast, SubmitDecision::Blocked { pending_parents: 1 })]
    fn submit_decision_table(
        #[case] parents: &[(&str, Status)],
        #[case] policy: OnParentFailure,
        #[case] expected: SubmitDecision,
    ) {
        assert_eq!(submit_decision(parents.iter().copied(), policy), expected);
    }

    #[rstest]
    #[case::child_terminal(Completed, Canceled, FailFast, 1, (1, ChildAction::None))]
    #[case::parent_not_terminal(Running, Blocked, FailFast, 1, (1, ChildAction::None))]
    #[case::last_parent_completes(Completed, Blocked, FailFast, 1, (0, ChildAction::Wake))]
    #[case::first_of_two(Completed, Blocked, FailFast, 2, (1, ChildAction::None))]
    #[case::pending_child_only_counts(Completed, Pending, FailFast, 1, (0, ChildAction::None))]
    #[case::never_below_zero(Completed, Blocked, FailFast, 0, (0, ChildAction::Wake))]
    #[case::ignore_failed(Failed, Blocked, IgnoreParentFailure, 1, (0, ChildAction::Wake))]
    #[case::fail_fast_failed(Failed, Blocked, FailFast, 1, (1, ChildAction::Cancel))]
    #[case::fail_fast_canceled(Canceled, Running, FailFast, 1, (1, ChildAction::Cancel))]
    fn parent_final_table(
        #[case] parent: Status,
        #[case] child: Status,
        #[case] policy: OnParentFailure,
        #[case] pending: u32,
        #[case] expected: (u32, ChildAction),
    ) {
        assert_eq!(decide_on_parent_final(parent, child, policy, pending), expected);
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[rstest]
    #[case::business_retry(FailKind::Business, (0, 2, 0), (Retrying, 1, 0, "boom"))]
    #[case::business_exhausted(FailKind::Business, (2, 2, 0), (Failed, 3, 0, "boom"))]
    #[case::no_retry_budget(FailKind::Business, (0, 0, 0), (Failed, 1, 0, "boom"))]
    #[case::throttled_retry(FailKind::Throttled, (0, 0, 1), (Retrying, 0, 2, "boom"))]
    #[case::throttled_cap(FailKind::Throttled, (0, 0, 2), (Failed, 0, 3, "throttled 3 times"))]
    #[case::skip(FailKind::Skip, (0, 5, 0), (Failed, 0, 0, "boom"))]
    fn fail_outcome_table(
        #[case] kind: FailKind,
        #[case] (attempts, max_retry, throttled): (u32, u32, u32),
        #[case] expected: (Status, u32, u32, &str),
    ) {
        let failure = Failure::new(kind, "boom", at(5_000));
        let out = fail_outcome(attempts, max_retry, throttled, 3, &failure, at(1_000));
        let (status, new_attempts, new_throttled, last_error) = expected;
        assert_eq!(out.status, status);
        assert_eq!((out.attempts, out.throttled), (new_attempts, new_throttled));
        assert_eq!(out.last_error, last_error);
        assert_eq!(out.run_at, (status == Retrying).then_some(at(5_000)));
    }

    #[rstest]
    #[case::now(RetryAt::Now, 7)]
    #[case::zero_means_now(RetryAt::At(Timestamp::ZERO), 7)]
    #[case::at(RetryAt::At(at(5_000)), 5_000)]
    #[case::at_in_the_past_as_given(RetryAt::At(at(3)), 3)]
    #[case::after(RetryAt::After(Duration::from_millis(5_000)), 5_007)]
    #[case::after_zero(RetryAt::After(Duration::ZERO), 7)]
    #[case::after_saturates(RetryAt::After(Duration::MAX), i64::MAX)]
    fn retry_times_resolve_against_the_brokers_now(#[case] retry: RetryAt, #[case] run_at: i64) {
        let failure = Failure::new(FailKind::Business, "x", retry);
        let out = fail_outcome(0, 3, 0, 100, &failure, at(7));
        assert_eq!(out.run_at, Some(Timestamp::from_millis(run_at)));
    }

    #[test]
    fn constructors_keep_their_meaning() {
        assert_eq!(Failure::business("x", Timestamp::ZERO).retry, RetryAt::Now);
        assert_eq!(Failure::throttled("x", at(9)).retry, RetryAt::At(at(9)));
        let after = Failure::business_after("x", Duration::from_secs(2));
        assert_eq!(
            (after.kind, after.retry),
            (FailKind::Business, RetryAt::After(Duration::from_secs(2)))
        );
        let after = Failure::throttled_after("x", Duration::from_secs(3));
        assert_eq!(
            (after.kind, after.retry),
            (FailKind::Throttled, RetryAt::After(Duration::from_secs(3)))
        );
        assert_eq!(
            (Failure::skip("x").kind, Failure::skip("x").retry),
            (FailKind::Skip, RetryAt::Now)
        );
    }

    #[rstest]
    #[case(true, 0, 3, ReapOutcome::Canceled)]
    #[case(false, 0, 3, ReapOutcome::Pending { lease_lost: 1 })]
    #[case(false, 2, 3, ReapOutcome::Failed { lease_lost: 3, last_error: "lease expired 3 times".into() })]
    fn reap_outcome_table(
        #[case] cancel_requested: bool,
        #[case] lease_lost: u32,
        #[case] cap: u32,
        #[case] expected: ReapOutcome,
    ) {
        assert_eq!(reap_outcome(cancel_requested, lease_lost, cap), expected);
    }

    #[test]
    fn replay_checks_in_contract_order() {
        let kind = |r: Result<(), Error>| r.err().map(|e| e.kind());
        use crate::ErrorKind as K;
        assert_eq!(kind(check_replay("e", Pending, true, false)), Some(K::ReplayNotFinal));
        assert_eq!(kind(check_replay("e", Completed, true, false)), Some(K::AlreadyReplayed));
        assert_eq!(kind(check_replay("e", Completed, false, false)), Some(K::CompletedNotAllowed));
        assert_eq!(kind(check_replay("e", Completed, false, true)), None);
        assert_eq!(kind(check_replay("e", Canceled, false, false)), None);
    }

    #[test]
    fn resume_rules() {
        use crate::ErrorKind as K;
        let kind = |r: Result<(), Error>| r.err().map(|e| e.kind());
        assert_eq!(kind(check_resume("t", Completed, false)), Some(K::NotResumable));
        assert_eq!(kind(check_resume("t", Running, false)), Some(K::NotResumable));
        assert_eq!(kind(check_resume("t", Failed, true)), Some(K::AlreadyReplayed));
        assert_eq!(kind(check_resume("t", Canceled, false)), None);
        let d = resume_decision("t", [("p", Failed)], FailFast).map_err(|e| e.kind());
        assert_eq!(d, Err(K::NotResumable));
        let d = resume_decision("t", [("p", Running)], FailFast).ok();
        assert_eq!(d, Some(SubmitDecision::Blocked { pending_parents: 1 }));
    }
}
