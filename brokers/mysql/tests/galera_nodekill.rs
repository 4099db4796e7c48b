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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brokertest::{within, WAIT_LIMIT};
use taskgate::{BoxError, Broker, ErrorKind, Filter, Status, Task};
use taskgate_mysql::testing::{MySqlFactory, MySqlStorage};
use taskgate_mysql::MySqlBroker;
use taskgate_sql::is_commit_unknown;
use taskgate_worker::{Config, QueueConfig, Runtime};

/// The script that kills and restarts nodes.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../ci/galera.sh");
/// The queue and task type of the workload.
const QUEUE: &str = "nodekill";
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
    let figures = run?;
    restored?;
    dropped?;
    figures.print();
    figures.assert_all()
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

/// One enqueue of a producer: what it submitted (its payload is unique), through which node,
/// when, and what it returned.
struct Submission {
    node: usize,
    payload: Vec<u8>,
    started: Instant,
    returned: Instant,
    outcome: Result<String, (ErrorKind, bool, String)>,
}

/// What the run saw, and what the cluster holds afterwards.
#[derive(Debug, Default)]
struct Figures {
    /// Enqueues that returned `Ok`, in all and through the killed node.
    acknowledged: usize,
    acknowledged_on_victim: usize,
    /// Enqueues that returned a definite error (not `CommitUnknown`), by kind.
    definite: BTreeMap<String, usize>,
    /// Enqueues that returned `CommitUnknown`.
    unknown: usize,
    /// Acknowledged tasks missing (or stored under another payload) afterwards.
    lost: Vec<String>,
    /// Tasks whose ack a runtime saw succeed that are not completed afterwards.
    undone: Vec<String>,
    /// Acks the runtimes saw succeed.
    acked: usize,
    /// Payloads whose enqueue returned a definite error, found stored.
    applied_after_error: Vec<String>,
    /// Payloads stored more than once.
    doubled: Vec<String>,
    /// Stored tasks that did not complete.
    unfinished: Vec<String>,
    /// Tasks stored.
    stored: usize,
    /// Handler executions; tasks that ran more than once; of those, the ones that had run on
    /// the killed node's runtime.
    executions: usize,
    ran_twice: usize,
    ran_twice_victim: usize,
    /// Tasks that ran more often than their lost leases allow (1 + `lease_lost`): a second
    /// holder of one claim.
    over_run: Vec<String>,
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

impl Figures {
    fn print(&self) {
        println!(
            "galera node kill (SIGKILL node {VICTIM} of 3 under load): {} enqueues acknowledged \
             ({} through node {VICTIM}), {} stored, lost {}, acks OK {} (undone {}), definite \
             enqueue errors {:?}, CommitUnknown {}, {} executions ({} tasks ran twice or more, \
             {} of them had run on node {VICTIM}'s runtime; over-run {}); SIGKILL {:?}; time to \
             resume (kill to the first successful enqueue started after it on a survivor) {:?}; \
             longest enqueue call on a survivor {:?}; node {VICTIM} restart to Synced (IST) \
             {:?}; restart to its first acknowledged enqueue {:?}",
            self.acknowledged,
            self.acknowledged_on_victim,
            self.stored,
            self.lost.len(),
            self.acked,
            self.undone.len(),
            self.definite,
            self.unknown,
            self.executions,
            self.ran_twice,
            self.ran_twice_victim,
            self.over_run.len(),
            self.kill,
            self.resume,
            self.longest_survivor,
            self.rejoin,
            self.victim_back,
        );
    }

    fn assert_all(&self) -> Result<(), BoxError> {
        let Figures { lost, undone, applied_after_error, doubled, unfinished, over_run, .. } = self;
        assert!(lost.is_empty(), "acknowledged enqueues lost: {lost:?}");
        assert!(undone.is_empty(), "acks reported OK undone: {undone:?}");
        assert!(
            applied_after_error.is_empty(),
            "applied after a definite error: {applied_after_error:?}"
        );
        assert!(doubled.is_empty(), "payloads stored twice: {doubled:?}");
        assert!(unfinished.is_empty(), "stored tasks that never completed: {unfinished:?}");
        assert!(over_run.is_empty(), "ran more often than their leases were lost: {over_run:?}");
        assert!(self.resume.is_some(), "no enqueue succeeded on a survivor after the kill");
        assert!(self.victim_back.is_some(), "no enqueue succeeded through the restarted node");
        assert!(self.acknowledged >= BEFORE + AFTER, "only {} acknowledged", self.acknowledged);
        Ok(())
    }
}

/// When the kill began, when the node was gone, and when its restart began.
struct Times {
    killed: Instant,
    down: Instant,
    restarted: Instant,
}

/// Counters the producers share with the run.
#[derive(Default)]
struct Progress {
    /// Set once the victim is down: enqueues started after it count in `fresh_ok`.
    down: Mutex<Option<Instant>>,
    fresh_ok: AtomicUsize,
    /// Set once the victim's restart began: successes through the victim started after it
    /// count in `victim_ok`.
    restarted: Mutex<Option<Instant>>,
    victim_ok: AtomicUsize,
    stop: AtomicBool,
    /// The last error each producer's enqueue returned (for a failure's message).
    last_error: Mutex<BTreeMap<usize, String>>,
}

/// The run: a producer and a runtime per node, the kill once the workload is under way, the
/// restart once enough enqueues started after the kill succeeded, the producers stopped once
/// the restarted node took enqueues again, every stored task left to finish, then the checks.
async fn workload(storage: &MySqlStorage) -> Result<Figures, BoxError> {
    // Handles go round robin over the nodes: producers on nodes 1, 2, 3, then runtimes.
    let mut producers = Vec::new();
    for _ in 0..3 {
        let producer = options(storage)?.connect().await?;
        producer.init(Default::default()).await?;
        producers.push(producer);
    }
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let runs = Arc::new(Mutex::new(Vec::new()));
    let mut runtimes = Vec::new();
    for node in 1..=3 {
        runtimes.push(start_runtime(storage, node, &acked, &runs).await?);
    }

    let progress = Arc::new(Progress::default());
    let producing: Vec<_> = (producers.iter().cloned().enumerate())
        .map(|(i, broker)| tokio::spawn(produce(i + 1, broker, progress.clone())))
        .collect();

    let acks = acked.clone();
    let p = progress.clone();
    until("the workload before the kill", WAIT_LIMIT, || {
        let acked = acks.lock().map(|a| a.len()).unwrap_or(0);
        p.fresh_ok.load(Ordering::SeqCst) >= BEFORE && acked >= BEFORE
    })
    .await?;

    let mut figures = Figures::default();
    let killed = Instant::now();
    script(&["kill", &VICTIM.to_string()]).await?;
    let down = Instant::now();
    figures.kill = down - killed;
    progress.fresh_ok.store(0, Ordering::SeqCst);
    *progress.down.lock().map_err(|_| "poisoned")? = Some(down);

    let p = progress.clone();
    until("enqueues on the survivors after the kill", WAIT_LIMIT, || {
        p.fresh_ok.load(Ordering::SeqCst) >= AFTER
    })
    .await?;

    let restarted = Instant::now();
    *progress.restarted.lock().map_err(|_| "poisoned")? = Some(restarted);
    script(&["up"]).await?;
    figures.rejoin = restarted.elapsed();
    let p = progress.clone();
    let back = until("enqueues through the restarted node", WAIT_LIMIT, || {
        p.victim_ok.load(Ordering::SeqCst) >= REJOINED
    })
    .await;
    if let Err(e) = back {
        let last = progress.last_error.lock().map(|l| l.clone()).unwrap_or_default();
        return Err(format!("{e}; last enqueue errors by node: {last:?}").into());
    }
    progress.stop.store(true, Ordering::SeqCst);
    let mut submissions = Vec::new();
    for p in producing {
        submissions.extend(p.await?);
    }

    let reader = &producers[0];
    until_all_final(reader).await?;
    for runtime in runtimes {
        let report = runtime.shutdown(Duration::from_secs(10)).await?;
        println!("runtime shutdown: {report:?}");
    }
    let stored = reader.list(&Filter { queue: QUEUE.into(), ..Filter::default() }).await?;
    for producer in producers {
        producer.close().await?;
    }
    let acked = acked.lock().map_err(|_| "poisoned")?.clone();
    let runs = runs.lock().map_err(|_| "poisoned")?.clone();
    let times = Times { killed, down, restarted };
    tally(&mut figures, &submissions, &stored, &acked, &runs, &times);
    Ok(figures)
}

/// The next handle's options on `storage` (round robin over the nodes): a small pool, a 1 s
/// connect timeout.
fn options(storage: &MySqlStorage) -> Result<taskgate_mysql::MySqlOptions, BoxError> {
    Ok(storage.options()?.pool_size(4).connect_timeout(Duration::from_secs(1)))
}

/// A runtime on `node` whose handler records each execution and whose observer records each
/// ack that succeeded (the broker notifies `completed` once the ack is known to be applied).
async fn start_runtime(
    storage: &MySqlStorage,
    node: usize,
    acked: &Arc<Mutex<BTreeSet<String>>>,
    runs: &Arc<Mutex<Vec<(usize, String)>>>,
) -> Result<Runtime, BoxError> {
    let broker = options(storage)?.connect().await?;
    broker.init(Default::default()).await?;
    let broker: Arc<dyn Broker> = Arc::new(broker);
    let (acked, runs) = (acked.clone(), runs.clone());
    let queue = QueueConfig::workers(WORKERS).lease_ttl(LEASE);
    let runtime = Runtime::builder(broker)
        .config(Config::new().queue(QUEUE, queue))
        .on_state_change(move |task| {
            if task.status == Status::Completed {
                if let Ok(mut acked) = acked.lock() {
                    acked.insert(task.id.clone());
                }
            }
        })
        .register_raw(QUEUE, move |ctx| {
            let runs = runs.clone();
            async move {
                if let Ok(mut runs) = runs.lock() {
                    runs.push((node, ctx.id().to_owned()));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(ctx.payload().map(<[u8]>::to_vec))
            }
        })
        .start()
        .await?;
    Ok(runtime)
}

/// One producer on `node`: enqueues tasks with unique payloads until `stop`, recording every
/// outcome.
async fn produce(node: usize, broker: MySqlBroker, progress: Arc<Progress>) -> Vec<Submission> {
    let mut done = Vec::new();
    for i in 0.. {
        if progress.stop.load(Ordering::SeqCst) {
            break;
        }
        let payload = format!("n{node}-{i}").into_bytes();
        let started = Instant::now();
        let task = Task::new(QUEUE, QUEUE).with_payload(payload.clone());
        let outcome = broker.enqueue(&task).await;
        let returned = Instant::now();
        let outcome = match outcome {
            Ok(stored) => {
                let down = progress.down.lock().ok().and_then(|d| *d);
                if down.is_none_or(|at| started >= at) {
                    progress.fresh_ok.fetch_add(1, Ordering::SeqCst);
                }
                let restarted = progress.restarted.lock().ok().and_then(|r| *r);
                if node == VICTIM && restarted.is_some_and(|at| started >= at) {
                    progress.victim_ok.fetch_add(1, Ordering::SeqCst);
                }
                Ok(stored.id)
            }
            Err(e) => {
                if let Ok(mut last) = progress.last_error.lock() {
                    last.insert(node, e.to_string());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err((e.kind(), is_commit_unknown(&e), e.to_string()))
            }
        };
        done.push(Submission { node, payload, started, returned, outcome });
    }
    done
}

/// Waits (up to `limit`) until `check` holds.
async fn until(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> bool,
) -> Result<(), BoxError> {
    let started = Instant::now();
    while !check() {
        if started.elapsed() > limit {
            return Err(format!("{what}: not reached within {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Waits (up to [`WAIT_LIMIT`]) until every task of the queue is final.
async fn until_all_final(reader: &MySqlBroker) -> Result<(), BoxError> {
    let started = Instant::now();
    let filter = Filter { queue: QUEUE.into(), ..Filter::default() };
    loop {
        let open = reader.list(&filter).await?.iter().filter(|t| !t.status.is_terminal()).count();
        if open == 0 {
            return Ok(());
        }
        if started.elapsed() > WAIT_LIMIT {
            return Err(format!("{open} tasks not final within {WAIT_LIMIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Compares what the producers and the runtimes were told with what the cluster holds.
fn tally(
    f: &mut Figures,
    submissions: &[Submission],
    stored: &[Task],
    acked: &BTreeSet<String>,
    runs: &[(usize, String)],
    times: &Times,
) {
    let by_id: HashMap<&str, &Task> = stored.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut by_payload: HashMap<&[u8], usize> = HashMap::new();
    for t in stored {
        *by_payload.entry(t.payload.as_deref().unwrap_or_default()).or_default() += 1;
    }
    let name = |s: &Submission| String::from_utf8_lossy(&s.payload).into_owned();
    for s in submissions {
        if s.node != VICTIM {
            f.longest_survivor = f.longest_survivor.max(s.returned - s.started);
        }
        match &s.outcome {
            Ok(id) => {
                f.acknowledged += 1;
                if s.node == VICTIM {
                    f.acknowledged_on_victim += 1;
                }
                if by_id.get(id.as_str()).is_none_or(|t| t.payload.as_deref() != Some(&s.payload)) {
                    f.lost.push(id.clone());
                }
                if s.node != VICTIM
                    && s.started >= times.down
                    && f.resume.is_none_or(|r| s.returned - times.killed < r)
                {
                    f.resume = Some(s.returned - times.killed);
                }
                if s.node == VICTIM
                    && s.started >= times.restarted
                    && f.victim_back.is_none_or(|r| s.returned - times.restarted < r)
                {
                    f.victim_back = Some(s.returned - times.restarted);
                }
            }
            Err((_, true, _)) => f.unknown += 1,
            Err((kind, false, text)) => {
                *f.definite.entry(format!("{kind:?}")).or_default() += 1;
                if by_payload.contains_key(s.payload.as_slice()) {
                    f.applied_after_error.push(format!("{}: {text}", name(s)));
                }
            }
        }
    }
    f.doubled = by_payload
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
        .collect();
    f.unfinished = stored
        .iter()
        .filter(|t| t.status != Status::Completed)
        .map(|t| format!("{} {}", t.id, t.status))
        .collect();
    f.stored = stored.len();
    f.acked = acked.len();
    f.undone = acked
        .iter()
        .filter(|id| by_id.get(id.as_str()).is_none_or(|t| t.status != Status::Completed))
        .cloned()
        .collect();
    let mut per_task: HashMap<&str, (usize, bool)> = HashMap::new();
    for (node, id) in runs {
        let entry = per_task.entry(id.as_str()).or_default();
        entry.0 += 1;
        entry.1 |= *node == VICTIM;
    }
    f.executions = runs.len();
    f.ran_twice = per_task.values().filter(|(n, _)| *n > 1).count();
    f.ran_twice_victim = per_task.values().filter(|(n, victim)| *n > 1 && *victim).count();
    f.over_run = per_task
        .iter()
        .filter(|(id, (n, _))| {
            by_id.get(*id).is_some_and(|t| *n > 1 + usize::try_from(t.lease_lost).unwrap_or(0))
        })
        .map(|(id, (n, _))| format!("{id}: {n} runs"))
        .collect();
}
