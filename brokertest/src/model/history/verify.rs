//! The properties a recorded history must have. Each check reports only what the records
//! prove: "A ended before B started" is a fact; overlapping calls prove nothing.

use std::collections::{BTreeMap, HashSet};

use taskgate::{Counts, Status, Task};

use super::record::{Act, Record, Res};

fn claims_of<'a>(records: &'a [Record], id: &str) -> Vec<&'a Record> {
    records.iter().filter(|r| r.act == Act::Claim && r.res == Res::Ok && r.task == id).collect()
}

/// No two leases on one task were valid at once: a call that succeeded with token A never
/// started after a claim that issued B had ended, when A was issued before B.
pub(crate) fn exclusive_leases(records: &[Record]) -> Vec<String> {
    let mut out = Vec::new();
    for op in records.iter().filter(|r| r.held_lease()) {
        let claims = claims_of(records, &op.task);
        let Some(own) = claims.iter().find(|c| c.token == op.token) else {
            out.push(format!("{op} succeeded with a token no claim returned"));
            continue;
        };
        let superseded = claims
            .iter()
            .find(|other| other.token != op.token && own.end < other.start && other.end < op.start);
        if let Some(other) = superseded {
            out.push(format!(
                "two valid leases on {}: {op} succeeded although {other} had issued a newer lease \
                 after {own}",
                op.task
            ));
        }
    }
    out
}

/// Every completed task was acked by exactly one token; nothing else was acked successfully.
pub(crate) fn acked_once(records: &[Record], tasks: &[Task]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tasks {
        let acks: Vec<&Record> =
            records.iter().filter(|r| r.act == Act::Ack && r.task == t.id).collect();
        let sure: Vec<&&Record> = acks.iter().filter(|r| r.res == Res::Ok).collect();
        let maybe = acks.iter().any(|r| r.res == Res::Dropped);
        if sure.len() > 1 {
            let list: Vec<String> = sure.iter().map(ToString::to_string).collect();
            out.push(format!(
                "{} was acked successfully {} times: {}",
                t.id,
                sure.len(),
                list.join("; ")
            ));
        }
        if t.status == Status::Completed && sure.is_empty() && !maybe {
            out.push(format!("{} is completed but no ack succeeded", t.id));
        }
        if t.status != Status::Completed && !sure.is_empty() {
            out.push(format!("{} was acked ({}) but ended {}", t.id, sure[0], t.status));
        }
    }
    out
}

/// No child was claimed before every parent was acked (children are fail_fast, so only a
/// completed parent lets a child run).
pub(crate) fn children_after_parents(records: &[Record], tasks: &[Task]) -> Vec<String> {
    let mut out = Vec::new();
    for child in tasks.iter().filter(|t| !t.depends_on.is_empty()) {
        for claim in claims_of(records, &child.id) {
            for parent in child.distinct_parents() {
                let acked_before = records.iter().any(|r| {
                    r.act == Act::Ack
                        && r.task == parent
                        && matches!(r.res, Res::Ok | Res::Dropped)
                        && r.start < claim.end
                });
                if !acked_before {
                    out.push(format!("{claim} woke {} before parent {parent} was acked", child.id));
                }
            }
        }
    }
    out
}

/// Final states follow the dependencies: a completed child has only completed parents, and a
/// child of a failed or cancelled parent is cancelled.
pub(crate) fn final_dependencies(tasks: &[Task]) -> Vec<String> {
    let status: BTreeMap<&str, Status> = tasks.iter().map(|t| (t.id.as_str(), t.status)).collect();
    let mut out = Vec::new();
    for child in tasks {
        for parent in child.distinct_parents() {
            let p = status.get(parent).copied();
            if child.status == Status::Completed && p != Some(Status::Completed) {
                out.push(format!("{} completed although parent {parent} is {p:?}", child.id));
            }
            let parent_failed = matches!(p, Some(Status::Failed | Status::Canceled));
            if parent_failed && child.status != Status::Canceled {
                out.push(format!(
                    "{} is {} although parent {parent} is {p:?}",
                    child.id, child.status
                ));
            }
        }
    }
    out
}

/// Propagation converged without the reaper's repair: no blocked task has only satisfied
/// parents (a lost wake-up) or a fail_fast parent that failed or was cancelled (a lost cascade).
pub(crate) fn converged(tasks: &[Task]) -> Vec<String> {
    let status: BTreeMap<&str, Status> = tasks.iter().map(|t| (t.id.as_str(), t.status)).collect();
    let mut out = Vec::new();
    for t in tasks.iter().filter(|t| t.status == Status::Blocked) {
        let parents: Vec<Option<Status>> =
            t.distinct_parents().iter().map(|p| status.get(p).copied()).collect();
        let failed = parents.iter().any(|s| matches!(s, Some(Status::Failed | Status::Canceled)));
        if failed && t.on_parent_failure == taskgate::OnParentFailure::FailFast {
            out.push(format!(
                "lost cascade: {} is blocked although a parent failed: {parents:?}",
                t.id
            ));
        } else if parents.iter().all(|s| s.is_some_and(Status::is_terminal)) {
            out.push(format!(
                "lost wake-up: {} is blocked although its parents {parents:?} finished",
                t.id
            ));
        }
    }
    out
}

/// After every worker released what it held and expired leases were reaped: each task is
/// terminal, claimable, or blocked on a parent that has not finished — none is stranded.
pub(crate) fn terminal_or_claimable(tasks: &[Task]) -> Vec<String> {
    let status: BTreeMap<&str, Status> = tasks.iter().map(|t| (t.id.as_str(), t.status)).collect();
    let mut out = Vec::new();
    for t in tasks {
        let waiting = t.status == Status::Blocked
            && t.distinct_parents().iter().any(|p| status.get(p).is_some_and(|s| !s.is_terminal()));
        if !(t.status.is_terminal() || t.status.is_claimable() || waiting) {
            out.push(format!("{} is stranded: {} (parents {:?})", t.id, t.status, t.depends_on));
        }
    }
    out
}

/// Running tasks whose lease token no caller ever received (a dropped claim that kept its
/// task).
pub(crate) fn leaked_claims(records: &[Record], tasks: &[Task]) -> Vec<String> {
    let known: HashSet<&str> = records
        .iter()
        .filter(|r| r.act == Act::Claim && r.res == Res::Ok)
        .map(|r| r.token.as_str())
        .collect();
    tasks
        .iter()
        .filter(|t| t.status == Status::Running && !known.contains(t.lease_token.as_str()))
        .map(|t| format!("{} is running under a lease no caller received", t.id))
        .collect()
}

/// Counts equal a re-aggregation of the list (zero entries ignored).
pub(crate) fn counts_match(counts: &Counts, tasks: &[Task]) -> Vec<String> {
    let mut expected = Counts::new();
    for t in tasks {
        *expected.entry(t.task_type.clone()).or_default().entry(t.status).or_insert(0) += 1;
    }
    let mut got = counts.clone();
    got.values_mut().for_each(|m| m.retain(|_, n| *n != 0));
    got.retain(|_, m| !m.is_empty());
    if got == expected {
        Vec::new()
    } else {
        vec![format!("counts {got:?} differ from the list's {expected:?}")]
    }
}
