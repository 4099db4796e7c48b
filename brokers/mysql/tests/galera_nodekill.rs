//! A MariaDB Galera node killed under a running workload (issue 39, item 5): on the 3-node
//! cluster of `ci/galera.sh` (`TASKGATE_GALERA_URLS`), a producer and a worker runtime per node
//! (each through its own node, as processes pointed at different nodes are), node 3's server
//! SIGKILLed once the workload is under way, the other two left to carry on, node 3 started
//! again (it rejoins by IST from a survivor's gcache) and its producer and runtime left to
//! resume through it.
//!
//! What holds: every task whose enqueue returned `Ok` is stored and completes; every ack the
//! runtimes saw succeed stays completed; no enqueue that failed with a definite error (anything
//! but `CommitUnknown`) was applied; no payload is stored twice; and a task runs more than once
//! only after it lost its lease (its holder's node died, or its ack's answer was lost with it):
//! at-least-once, counted and printed. The figures (tasks, lost, ran twice, the stall of the
//! survivors, time to resume, time for the node to rejoin) are printed (`-- --nocapture`) and
//! recorded in docs/scaling.md.
//!
//! The cluster is brought back to 3 synced nodes at the end, on failure too (`ci/galera.sh up`,
//! also from `Drop`), so the tests that run after it find it whole. Without
//! `TASKGATE_GALERA_URLS` the test skips loudly, or fails under `TASKGATE_REQUIRE_DB=1`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brokertest::{within, WAIT_LIMIT};
use taskgate::{BoxError, Broker};
use taskgate_mysql::testing::{MySqlFactory, MySqlStorage};
use taskgate_sql::is_commit_unknown;
use workertest::fault::{
    first_ok_after, longest, runs_per_task, until, Figures, Ledger, Progress, Workload,
};

/// The script that kills and restarts nodes.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../ci/galera.sh");
/// The workload: producers' payloads `n<node>-<n>` on queue `nodekill`.
const WORKLOAD: Workload = Workload {
    queue: "nodekill",
    label: "n",
    pause: Duration::from_millis(50),
    commit_unknown: is_commit_unknown,
};
/// The node killed (1-based, as `ci/galera.sh` numbers them).
const VICTIM: usize = 3;
/// Tasks acknowledged to producers, and tasks acked, before the kill.
const BEFORE: usize = 100;
/// Tasks acknowledged from enqueues started after the kill, before the node is started again.
const AFTER: usize = 100;
/// Tasks acknowledged through the restarted node once it is back, before the producers stop.
const REJOINED: usize = 20;
/// Workers per runtime.
const WORKERS: u32 = 2;
/// The runtimes' lease: the tasks the killed node's runtime held run again once it expires.
const LEASE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_one_node_loses_no_acknowledged_task() -> Result<(), BoxError> {
    let factory = MySqlFactory::galera_from_env();
    let storage = match factory.mysql_storage().await {
        Ok(storage) => storage,
        Err(e) if e.downcast_ref::<brokertest::Unavailable>().is_some() => {
            brokertest::skip("galera node kill", &e);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    if storage.nodes().len() < 3 {
        brokertest::skip("galera node kill", &"TASKGATE_GALERA_URLS names fewer than 3 nodes");
        return Ok(());
    }
    let restore = Restore { done: AtomicBool::new(false) };
    let run = within(WAIT_LIMIT * 4, "the node-kill run", workload(&storage)).await;
    let restored = restore.now().await;
    let dropped = storage.drop_tables().await;
    let run = run?;
    restored?;
    dropped?;
    run.print();
    run.assert_all();
    Ok(())
}

/// Brings the cluster back to 3 synced nodes (`ci/galera.sh up`), once: [`Restore::now`] at
/// the end of the test, or `Drop` if the test panicked before.
struct Restore {
    done: AtomicBool,
}

impl Restore {
    async fn now(&self) -> Result<(), BoxError> {
        if self.done.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        script(&["up"]).await.map(|_| ())
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if !self.done.swap(true, Ordering::SeqCst) {
            let _ = std::process::Command::new("bash").arg(SCRIPT).arg("up").status();
        }
    }
}

/// Runs `ci/galera.sh` with `args`; its stdout, or an error with its stderr.
async fn script(args: &[&str]) -> Result<String, BoxError> {
    let out = tokio::process::Command::new("bash").arg(SCRIPT).args(args).output().await?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("ci/galera.sh {}: {}", args.join(" "), err.trim()).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// What the run saw ([`Figures`], the kit's) and the node kill's own figures.
#[derive(Debug, Default)]
struct Run {
    figures: Figures,
    /// Enqueues acknowledged through the killed node.
    acknowledged_on_victim: usize,
    /// Tasks that ran more than once and had run on the killed node's runtime.
    ran_twice_victim: usize,
    /// The SIGKILL itself (until the process is gone).
    kill: Duration,
    /// From the kill to the return of the first successful enqueue started after it on a
    /// surviving node (time to resume), and the longest enqueue call on a surviving node.
    resume: Option<Duration>,
    longest_survivor: Duration,
    /// `ci/galera.sh up` for the killed node: start, IST, Synced.
    rejoin: Duration,
    /// From the start of the rejoin to the first successful enqueue through the killed node.
    victim_back: Option<Duration>,
}

impl Run {
    fn print(&self) {
        println!(
            "galera node kill (SIGKILL node {VICTIM} of 3 under load): {}, {} enqueues \
             acknowledged through node {VICTIM}, {} tasks that ran twice or more had run on node \
             {VICTIM}'s runtime, over-run {}; SIGKILL {:?}; time to resume (kill to the first \
             successful enqueue started after it on a survivor) {:?}; longest enqueue call on a \
             survivor {:?}; node {VICTIM} restart to Synced (IST) {:?}; restart to its first \
             acknowledged enqueue {:?}",
            self.figures.summary(),
            self.acknowledged_on_victim,
            self.ran_twice_victim,
            self.figures.over_run.len(),
            self.kill,
            self.resume,
            self.longest_survivor,
            self.rejoin,
            self.victim_back,
        );
    }

    fn assert_all(&self) {
        self.figures.assert_nothing_lost();
        self.figures.assert_consistent(BEFORE + AFTER);
        let over_run = &self.figures.over_run;
        assert!(over_run.is_empty(), "ran more often than their leases were lost: {over_run:?}");
        assert!(self.resume.is_some(), "no enqueue succeeded on a survivor after the kill");
        assert!(self.victim_back.is_some(), "no enqueue succeeded through the restarted node");
    }
}

/// The run: a producer and a runtime per node, the kill once the workload is under way, the
/// restart once enough enqueues started after the kill succeeded, the producers stopped once
/// the restarted node took enqueues again, every stored task left to finish, then the checks.
async fn workload(storage: &MySqlStorage) -> Result<Run, BoxError> {
    // Handles go round robin over the nodes: producers on nodes 1, 2, 3, then runtimes.
    let mut producers: Vec<Arc<dyn Broker>> = Vec::new();
    for _ in 0..3 {
        let producer = options(storage)?.connect().await?;
        producer.init(Default::default()).await?;
        producers.push(Arc::new(producer));
    }
    let ledger = Arc::new(Ledger::default());
    let mut runtimes = Vec::new();
    for node in 1..=3 {
        let broker = options(storage)?.connect().await?;
        broker.init(Default::default()).await?;
        let runtime = WORKLOAD.runtime(node, Arc::new(broker), (WORKERS, LEASE), &ledger);
        runtimes.push(runtime.await?);
    }

    let progress = Progress::watching(VICTIM);
    let producing: Vec<_> = (producers.iter().cloned().enumerate())
        .map(|(i, broker)| WORKLOAD.produce(i + 1, broker, progress.clone()))
        .collect();

    until("the workload before the kill", WAIT_LIMIT, || {
        progress.fresh.count() >= BEFORE && ledger.acked() >= BEFORE
    })
    .await?;

    let mut run = Run::default();
    let killed = Instant::now();
    script(&["kill", &VICTIM.to_string()]).await?;
    let down = Instant::now();
    run.kill = down - killed;
    progress.fresh.mark(down);

    until("enqueues on the survivors after the kill", WAIT_LIMIT, || {
        progress.fresh.count() >= AFTER
    })
    .await?;

    let restarted = Instant::now();
    progress.on_node.mark(restarted);
    script(&["up"]).await?;
    run.rejoin = restarted.elapsed();
    let back = until("enqueues through the restarted node", WAIT_LIMIT, || {
        progress.on_node.count() >= REJOINED
    })
    .await;
    if let Err(e) = back {
        let last = progress.last_errors();
        return Err(format!("{e}; last enqueue errors by node: {last:?}").into());
    }
    progress.stop();
    let mut submissions = Vec::new();
    for p in producing {
        submissions.extend(p.await?);
    }

    let reader = &*producers[0];
    WORKLOAD.until_all_final(reader, WAIT_LIMIT).await?;
    for runtime in runtimes {
        let report = runtime.shutdown(Duration::from_secs(10)).await?;
        println!("runtime shutdown: {report:?}");
    }
    let stored = WORKLOAD.stored(reader).await?;
    for producer in &producers {
        producer.close().await?;
    }
    run.figures = Figures::tally(&submissions, &stored, &ledger);
    let survivor = |s: &workertest::fault::Submission| s.node != VICTIM;
    let victim = |s: &workertest::fault::Submission| s.node == VICTIM;
    run.acknowledged_on_victim = submissions.iter().filter(|s| victim(s) && s.outcome.is_ok()).count();
    run.resume = first_ok_after(&submissions, down, survivor).map(|s| s.returned - killed);
    run.victim_back = first_ok_after(&submissions, restarted, victim).map(|s| s.returned - restarted);
    run.longest_survivor = longest(&submissions, survivor);
    let runs = ledger.runs();
    let on_victim: std::collections::HashSet<&str> =
        runs.iter().filter(|(node, _)| *node == VICTIM).map(|(_, id)| id.as_str()).collect();
    run.ran_twice_victim =
        runs_per_task(&runs).iter().filter(|(id, n)| **n > 1 && on_victim.contains(*id)).count();
    Ok(run)
}

/// The next handle's options on `storage` (round robin over the nodes): a small pool, a 1 s
/// connect timeout.
fn options(storage: &MySqlStorage) -> Result<taskgate_mysql::MySqlOptions, BoxError> {
    Ok(storage.options()?.pool_size(4).connect_timeout(Duration::from_secs(1)))
}
