//! Retention (extensions §E16; decisions "Retention").

use std::collections::BTreeSet;
use std::time::Duration;

use taskgate::{ErrorKind, PruneRequest, ReplayRequest, Status, Task, Timestamp};

use super::check::{expect_err, expect_invalid, stored_ids};
use crate::{task, CaseResult, Factory, Harness};

const HOUR: Duration = Duration::from_secs(3600);

/// The IDs of one case run: fixed ones plus the replays' generated ones.
struct World {
    /// The replays, by name: kc-2, kd-2, kd-3, kn-2, kl-2, rp-2.
    replays: Vec<(&'static str, String)>,
}

impl World {
    fn id(&self, name: &str) -> String {
        self.replays
            .iter()
            .find(|(n, _)| *n == name)
            .map_or_else(|| name.to_owned(), |(_, id)| id.clone())
    }

    fn ids(&self, names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| self.id(n)).collect()
    }
}

/// Given tasks finished at t0 (old-c, old-f, old-x; par-live with a pending child; par-done
/// with a completed child; gp whose child orph fails later; rp-1, cancelled and replayed by
/// the key-less rp-2, which fails at t2), at t1 (edge) and at t2 (new-c, orph), running and
/// pending tasks, and keyed chains kc (failed, completed), kd (3 canceled), kn (failed,
/// pending) and kl (failed at t0, failed at t2), when prune runs with cutoff t1, then: a
/// non-terminal status is `InvalidInput` (statuses); `[failed]` deletes old-f only; all
/// statuses with limit 2 then no limit delete old-c, old-x, par-done, done-child and gp
/// (2 + 3) but never par-live, edge, new-c, a keyed task or rp-1 (a replay chain goes whole,
/// so no stored `replay_of` names a pruned ID); orph can no longer resume; with include_keyed,
/// `[failed]` deletes nothing (no chain qualifies whole), `[canceled]` with limit 2 leaves kd
/// (it would cross the limit) and with limit 3 deletes it, all statuses delete kc; kc and kd
/// re-open while kn stays taken; par-live goes once its child finished; a future cutoff with
/// `[canceled]` keeps rp-1 (rp-2 failed); a future cutoff with every status deletes every
/// terminal task and chain, rp-1 and rp-2 together, but never a running or pending one.
pub async fn c31_prune(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let w = build(&h).await?;
    let t1 = h.now().saturating_sub(HOUR);
    let all = stored_ids(&*h.broker).await?;
    bad_statuses(&h, t1).await;
    assert_eq!(stored_ids(&*h.broker).await?, all, "rejected prunes deleted tasks");
    unkeyed_rules(&h, &w, t1, &all).await?;
    keyed_rules(&h, &w, t1).await?;
    let live = h.dequeue(&["live-child"]).await;
    h.broker.ack("live-child", &live.lease_token, None).await?;
    assert_eq!(prune(&h, t1, &[], 0, false).await, 1, "par-live once its child finished");
    let far = h.now().saturating_add(24 * HOUR);
    let canceled = prune(&h, far, &[Status::Canceled], 0, false).await;
    assert_eq!(canceled, 0, "rp-1 is canceled, but its replay rp-2 failed: the chain stays");
    assert_eq!(h.get(&w.id("rp-2")).await.replay_of, "rp-1", "rp-2 still names rp-1");
    assert_eq!(prune(&h, far, &[], 0, true).await, 8, "everything terminal, chains whole");
    let mut expected = w.ids(&["run1", "pend1", "kn-1", "kn-2"]);
    expected.extend(reopened(&h).await?);
    assert_eq!(stored_ids(&*h.broker).await?, expected, "only live tasks and kn's chain remain");
    h.finish().await
}

/// Runs one prune, which must succeed; returns how many tasks it deleted.
async fn prune(
    h: &Harness,
    before: Timestamp,
    statuses: &[Status],
    limit: usize,
    keyed: bool,
) -> u64 {
    let request = PruneRequest {
        finished_before: before,
        statuses: statuses.to_vec(),
        limit,
        include_keyed: keyed,
    };
    match h.broker.prune(request.clone()).await {
        Ok(n) => n,
        Err(e) => panic!("prune {request:?} failed: {e}"),
    }
}

async fn bad_statuses(h: &Harness, t1: Timestamp) {
    for statuses in [vec![Status::Pending], vec![Status::Completed, Status::Running]] {
        let request = PruneRequest {
            finished_before: t1,
            statuses: statuses.clone(),
            ..PruneRequest::default()
        };
        let r = h.broker.prune(request).await;
        expect_invalid(r, "statuses", &format!("prune of {statuses:?}"));
    }
}

async fn unkeyed_rules(
    h: &Harness,
    w: &World,
    t1: Timestamp,
    all: &BTreeSet<String>,
) -> CaseResult {
    assert_eq!(prune(h, t1, &[Status::Failed], 0, false).await, 1, "[failed] before t1");
    let mut left = all.clone();
    left.remove("old-f");
    assert_eq!(stored_ids(&*h.broker).await?, left, "[failed] deletes old-f only");
    let candidates = w.ids(&["old-c", "old-x", "par-done", "done-child", "gp"]);
    assert_eq!(prune(h, t1, &[], 2, false).await, 2, "all statuses, limit 2");
    let now = stored_ids(&*h.broker).await?;
    let gone: BTreeSet<String> = left.difference(&now).cloned().collect();
    assert!(gone.len() == 2 && gone.is_subset(&candidates), "limit 2 deleted {gone:?}");
    assert_eq!(prune(h, t1, &[], 0, false).await, 3, "all statuses, no limit");
    let left: BTreeSet<String> = left.difference(&candidates).cloned().collect();
    assert_eq!(stored_ids(&*h.broker).await?, left, "after the unkeyed prunes");
    let r = h.broker.resume("orph").await;
    expect_err(r, ErrorKind::NotResumable, "resume of orph, whose parent gp was pruned");
    Ok(())
}

async fn keyed_rules(h: &Harness, w: &World, t1: Timestamp) -> CaseResult {
    let before = stored_ids(&*h.broker).await?;
    assert_eq!(prune(h, t1, &[Status::Failed], 0, true).await, 0, "no chain is wholly failed");
    assert_eq!(prune(h, t1, &[Status::Canceled], 2, true).await, 0, "kd would cross limit 2");
    assert_eq!(stored_ids(&*h.broker).await?, before, "no keyed task may go yet");
    assert_eq!(prune(h, t1, &[Status::Canceled], 3, true).await, 3, "kd fits limit 3");
    assert_eq!(prune(h, t1, &[], 0, true).await, 2, "kc goes whole; kn and kl stay");
    let gone = w.ids(&["kd-1", "kd-2", "kd-3", "kc-1", "kc-2"]);
    let left: BTreeSet<String> = before.difference(&gone).cloned().collect();
    assert_eq!(stored_ids(&*h.broker).await?, left, "after the keyed prunes");
    Ok(())
}

/// kc and kd are free again; kn is still taken. Returns the new executions' IDs.
async fn reopened(h: &Harness) -> Result<Vec<String>, taskgate::Error> {
    let taken = h.broker.enqueue(&Task::new("job", "kn").with_business_key("kn")).await;
    expect_err(taken, ErrorKind::TaskExists, "key kn, whose chain is still stored");
    let mut new = Vec::new();
    for key in ["kc", "kd"] {
        let t = h.broker.enqueue(&Task::new("job", key).with_business_key(key)).await?;
        assert_eq!((t.status, t.replay_of.as_str()), (Status::Pending, ""), "a new {key} chain");
        new.push(t.id);
    }
    Ok(new)
}

/// Builds the world: t0 finishes, advance 1 h, edge at t1, advance 1 h, t2 finishes.
async fn build(h: &Harness) -> Result<World, taskgate::Error> {
    let rp2 = unkeyed_at_t0(h).await?;
    let mut w = World { replays: keyed_at_t0(h).await? };
    w.replays.push(("rp-2", rp2));
    h.advance(HOUR);
    h.enqueue(task("edge", "job", "edge")).await;
    h.ack_by_id("edge", "edge").await;
    h.advance(HOUR);
    h.enqueue(task("new-c", "job", "new-c")).await;
    h.ack_by_id("new-c", "new-c").await;
    h.fail_by_id("orph", "orph").await;
    h.fail_by_id("kl", &w.id("kl-2")).await;
    h.fail_by_id("rp", &w.id("rp-2")).await;
    Ok(w)
}

async fn unkeyed_at_t0(h: &Harness) -> Result<String, taskgate::Error> {
    for id in ["old-c", "par-live", "par-done", "gp"] {
        h.enqueue(task(id, "job", id)).await;
        h.ack_by_id(id, id).await;
    }
    h.enqueue(task("old-f", "job", "old-f")).await;
    h.fail_by_id("old-f", "old-f").await;
    h.enqueue(task("old-x", "job", "old-x")).await;
    h.broker.cancel("old-x").await?;
    h.enqueue(task("live-child", "job", "live-child").with_depends_on(["par-live"])).await;
    h.enqueue(task("done-child", "job", "done-child").with_depends_on(["par-done"])).await;
    h.ack_by_id("done-child", "done-child").await;
    h.enqueue(task("orph", "job", "orph").with_depends_on(["gp"])).await;
    h.enqueue(task("run1", "job", "run1")).await;
    h.dequeue(&["run1"]).await;
    h.enqueue(task("pend1", "job", "pend1")).await;
    h.enqueue(task("rp-1", "job", "rp")).await;
    h.broker.cancel("rp-1").await?;
    Ok(h.broker.replay(ReplayRequest::by_id("rp-1")).await?.id)
}

/// kc: failed ← completed; kd: canceled ×3; kn: failed ← pending; kl: failed ← pending (fails
/// at t2). Each key's tasks live in the queue named after the key.
async fn keyed_at_t0(h: &Harness) -> Result<Vec<(&'static str, String)>, taskgate::Error> {
    for key in ["kc", "kd", "kn", "kl"] {
        h.enqueue(Task::new("job", key).with_id(format!("{key}-1")).with_business_key(key)).await;
    }
    for key in ["kc", "kn", "kl"] {
        h.fail_by_id(key, &format!("{key}-1")).await;
    }
    h.broker.cancel("kd-1").await?;
    let kc2 = h.broker.replay(ReplayRequest::by_id("kc-1")).await?.id;
    h.ack_by_id("kc", &kc2).await;
    let kd2 = h.broker.replay(ReplayRequest::by_id("kd-1")).await?.id;
    h.broker.cancel(&kd2).await?;
    let kd3 = h.broker.replay(ReplayRequest::by_id(&kd2)).await?.id;
    h.broker.cancel(&kd3).await?;
    let kn2 = h.broker.replay(ReplayRequest::by_id("kn-1")).await?.id;
    let kl2 = h.broker.replay(ReplayRequest::by_id("kl-1")).await?.id;
    Ok(vec![("kc-2", kc2), ("kd-2", kd2), ("kd-3", kd3), ("kn-2", kn2), ("kl-2", kl2)])
}
