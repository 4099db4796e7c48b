//! A task's children: the list filter by parent (contract §7.1.2), what the admin API's task
//! view and the console show as a task's children.

use std::time::Duration;

use taskgate::{Filter, ReplayRequest, Status};

use super::check::must;
use crate::{task, CaseResult, Factory, Harness};

/// The IDs `list` returns for `filter`.
async fn listed(
    h: &Harness,
    filter: Filter,
    what: &str,
) -> Result<Vec<String>, taskgate::BoxError> {
    let tasks = must(h.broker.list(&filter).await, &format!("list {what}"))?;
    Ok(tasks.into_iter().map(|t| t.id).collect())
}

fn children_of(parent: &str) -> Filter {
    Filter { parent: parent.into(), ..Filter::default() }
}

/// Given parents `p1`, `p2` (etl, qp) and, created in this order one millisecond apart, `zc`
/// (child of p1), `ac` (of p2 and p1), `dup` (of p1 twice), `oc` (mail in qo, owner `team`, of
/// p2), the grandchild `g` (of ac) and the unrelated `solo`: the filter by parent lists p1's
/// children `zc, ac, dup` (creation order, not ID order; `dup` once), p2's `ac, oc`, ac's `g`;
/// none for `g`, `solo` and an unknown ID, without error. It combines with type, queue,
/// owner and status, and pages with limit and offset. When p1 completes (`zc`, `dup` pending,
/// `ac` still blocked on p2) and p2 fails (`ac`, `oc` and `g` canceled), the children stay
/// listed, in their new statuses. A replay of `ac` is nobody's child, and has none.
pub async fn c53_list_children(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let tick = || h.advance(Duration::from_millis(1));
    h.enqueue(task("p1", "etl", "qp")).await;
    tick();
    h.enqueue(task("p2", "etl", "qp")).await;
    for child in [
        task("zc", "etl", "qc").with_depends_on(["p1"]),
        task("ac", "etl", "qc").with_depends_on(["p2", "p1"]),
        task("dup", "etl", "qc").with_depends_on(["p1", "p1"]),
        task("oc", "mail", "qo").with_depends_on(["p2"]).with_owner("team"),
        task("g", "etl", "qc").with_depends_on(["ac"]),
        task("solo", "etl", "qc"),
    ] {
        tick();
        h.enqueue(child).await;
    }

    assert_eq!(listed(&h, children_of("p1"), "children of p1").await?, ["zc", "ac", "dup"]);
    assert_eq!(listed(&h, children_of("p2"), "children of p2").await?, ["ac", "oc"]);
    assert_eq!(listed(&h, children_of("ac"), "children of ac").await?, ["g"], "direct only");
    for none in ["g", "solo", "no-such-task"] {
        let got = listed(&h, children_of(none), &format!("children of {none}")).await?;
        assert!(got.is_empty(), "{none} has no children, listed {got:?}");
    }

    let mail = Filter { task_type: "mail".into(), ..children_of("p2") };
    assert_eq!(listed(&h, mail, "mail children of p2").await?, ["oc"], "with type");
    let qo = Filter { queue: "qo".into(), ..children_of("p1") };
    assert!(listed(&h, qo, "children of p1 in qo").await?.is_empty(), "with queue");
    let team = Filter { owner: "team".into(), ..children_of("p2") };
    assert_eq!(listed(&h, team, "team's children of p2").await?, ["oc"], "with owner");
    let page = |limit: usize, offset: usize| Filter { limit, offset, ..children_of("p1") };
    assert_eq!(listed(&h, page(2, 0), "page 1").await?, ["zc", "ac"], "limit 2");
    assert_eq!(listed(&h, page(2, 2), "page 2").await?, ["dup"], "limit 2, offset 2");
    assert!(listed(&h, page(2, 3), "past the end").await?.is_empty(), "offset 3");
    assert_eq!(listed(&h, page(0, 1), "offset alone").await?, ["ac", "dup"], "offset 1");

    h.ack_by_id("qp", "p1").await;
    let by_status =
        |parent: &str, status: Status| Filter { status: Some(status), ..children_of(parent) };
    let pending = listed(&h, by_status("p1", Status::Pending), "pending children of p1").await?;
    assert_eq!(pending, ["zc", "dup"], "p1 completed: its only-parent children woke");
    let blocked = listed(&h, by_status("p1", Status::Blocked), "blocked children of p1").await?;
    assert_eq!(blocked, ["ac"], "ac still waits for p2");
    assert_eq!(
        listed(&h, children_of("p1"), "children of completed p1").await?,
        ["zc", "ac", "dup"],
        "a finished parent keeps its children"
    );

    h.fail_by_id("qp", "p2").await;
    let canceled = listed(&h, by_status("p2", Status::Canceled), "canceled children").await?;
    assert_eq!(canceled, ["ac", "oc"], "p2 failed: its fail_fast children were canceled");
    assert_eq!(h.get("g").await.status, Status::Canceled, "g: the cancel cascaded");
    assert_eq!(listed(&h, children_of("ac"), "children of canceled ac").await?, ["g"]);

    let replay = must(h.broker.replay(ReplayRequest::by_id("ac")).await, "replay ac")?;
    assert!(replay.depends_on.is_empty(), "a replay carries no depends_on");
    for parent in ["p1", "p2"] {
        let got = listed(&h, children_of(parent), &format!("children of {parent}")).await?;
        assert!(!got.contains(&replay.id), "the replay of ac is no child of {parent}: {got:?}");
    }
    let of_replay = listed(&h, children_of(&replay.id), "children of the replay").await?;
    assert!(of_replay.is_empty(), "the replay does not inherit ac's child: {of_replay:?}");
    h.finish().await
}
