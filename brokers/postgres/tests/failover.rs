//! PostgreSQL failover under a running workload (issue 39, item 4): a primary and a streaming
//! standby of the test's own (`ci/pg-standby.sh`), producers enqueueing and a worker runtime
//! executing through a virtual address, the primary stopped with `pg_ctl stop -m immediate`,
//! the standby promoted, and the virtual address repointed to it — as a VIP, a DNS name or a
//! pooler is repointed in production (sqlx 0.8 has no multi-host URL; docs/scaling.md).
//!
//! With synchronous replication nothing acknowledged is lost: every task whose enqueue
//! returned `Ok` is there and completes, every ack the runtime saw succeed stays completed, and
//! no enqueue that failed with a definite error (anything but `CommitUnknown`) was applied.
//! With asynchronous replication the same run measures what is lost (printed, not asserted:
//! it depends on how far the standby lagged when the primary died).
//!
//! Each test builds a fresh pair in a directory of its own and removes it afterwards, so a
//! second run starts from the same place; a pair left by a killed run is swept by the next.
//! Without the server binaries (initdb, pg_ctl, pg_basebackup) the tests skip loudly, or fail
//! under `TASKGATE_REQUIRE_DB=1`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brokertest::{within, WAIT_LIMIT};
use sqlx::Connection as _;
use taskgate::{BoxError, Broker, ErrorKind, Filter, Status, Task};
use taskgate_postgres::{PgBroker, PgOptions};
use taskgate_sql::is_commit_unknown;
use taskgate_worker::{Config, QueueConfig, Runtime};
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The script that builds, fails over and removes pairs.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../ci/pg-standby.sh");
/// The queue and task type of the workload.
const QUEUE: &str = "failover";
/// Tasks acknowledged to producers, and tasks acked, before the primary is stopped.
const BEFORE: usize = 100;
/// Tasks acknowledged to producers from enqueues that started after the stop, before the
/// producers stop.
const AFTER: usize = 100;
/// Producers enqueueing at once.
const PRODUCERS: usize = 2;
/// The runtime's lease: short, so that the tasks whose acks were lost with the primary run
/// again soon.
const LEASE: Duration = Duration::from_secs(3);

/// How long the primary stays down before the standby is promoted: the time a failover
/// manager takes to notice (enqueues started meanwhile fail, or wait and settle).
const DETECTION: Duration = Duration::from_secs(1);

/// The two tests build servers and load the machine: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_standby_failover_loses_no_acknowledged_write() -> Result<(), BoxError> {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(pair) = Pair::build(Replication::Sync).await? else { return Ok(()) };
    let run = within(WAIT_LIMIT * 3, "the synchronous failover run", workload(&pair)).await;
    pair.remove().await?;
    let figures = run?;
    figures.print("synchronous");
    figures.assert_common()?;
    assert_eq!(figures.lost.len(), 0, "acknowledged enqueues lost: {:?}", figures.lost);
    assert_eq!(figures.undone.len(), 0, "acks reported OK undone: {:?}", figures.undone);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_standby_failover_loss_is_measured() -> Result<(), BoxError> {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(pair) = Pair::build(Replication::Async).await? else { return Ok(()) };
    let run = within(WAIT_LIMIT * 3, "the asynchronous failover run", workload(&pair)).await;
    pair.remove().await?;
    let figures = run?;
    figures.print("asynchronous");
    // What was lost is measured, not asserted; what holds whatever the replication does:
    // every stored task completes, and a definite error never hides an applied write.
    figures.assert_common()
}

/// How the standby confirms commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replication {
    /// `synchronous_standby_names` names the standby: a commit returns once the standby has
    /// flushed it.
    Sync,
    /// `synchronous_standby_names = ''`: a commit returns once the primary has flushed it.
    Async,
}

/// A primary and its streaming standby in a directory of their own (`ci/pg-standby.sh`).
struct Pair {
    dir: PathBuf,
    primary: u16,
    standby: u16,
    /// Removed already (by [`Pair::remove`]); `Drop` removes it otherwise.
    removed: AtomicBool,
}

impl Pair {
    /// Builds a fresh pair on free ports; `None` after a loud skip when the server binaries
    /// are missing (a failure under `TASKGATE_REQUIRE_DB=1`).
    async fn build(replication: Replication) -> Result<Option<Pair>, BoxError> {
        if let Err(why) = script(&["bindir"]).await {
            brokertest::skip("postgres failover", &why);
            return Ok(None);
        }
        let root = std::env::temp_dir().join("taskgate-pg-ha");
        std::fs::create_dir_all(&root)?;
        script(&["sweep", path(&root)?]).await?;
        let mode = match replication {
            Replication::Sync => "sync",
            Replication::Async => "async",
        };
        // A free port can be taken between our check and the server's bind: try again then.
        let mut last = None;
        for attempt in 0..3 {
            let (primary, standby) = (free_port()?, free_port()?);
            let dir = root.join(format!("{}-{mode}-{attempt}", std::process::id()));
            let (p, s) = (primary.to_string(), standby.to_string());
            match script(&["pair", path(&dir)?, &p, &s, mode]).await {
                Ok(_) => {
                    let removed = AtomicBool::new(false);
                    return Ok(Some(Pair { dir, primary, standby, removed }));
                }
                Err(e) => {
                    let _ = script(&["remove", path(&dir)?]).await;
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| "no attempt".into()))
    }

    fn data(&self, server: &str) -> Result<String, BoxError> {
        Ok(path(&self.dir.join(server))?.to_owned())
    }

    /// Stops both servers and deletes the directory.
    async fn remove(&self) -> Result<(), BoxError> {
        if !self.removed.swap(true, Ordering::SeqCst) {
            script(&["remove", path(&self.dir)?]).await?;
        }
        Ok(())
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        if !self.removed.swap(true, Ordering::SeqCst) {
            let _ = std::process::Command::new("bash")
                .arg(SCRIPT)
                .arg("remove")
                .arg(&self.dir)
                .status();
        }
    }
}

/// Runs `ci/pg-standby.sh` with `args`; its stdout, or an error with its stderr.
async fn script(args: &[&str]) -> Result<String, BoxError> {
    let out = tokio::process::Command::new("bash").arg(SCRIPT).args(args).output().await?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("ci/pg-standby.sh {}: {}", args.join(" "), err.trim()).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn path(p: &Path) -> Result<&str, BoxError> {
    p.to_str().ok_or_else(|| format!("{p:?} is not UTF-8").into())
}

/// A port on 127.0.0.1 nothing listens on now.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

fn url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable&connect_timeout=2")
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The address the broker connects to, standing for a virtual IP that the failover moves to
/// the new primary (or a DNS name, or a pooler's backend, repointed): a TCP forwarder on a
/// fixed port. While it has no owner — from the primary's death to the repoint — it leads
/// nowhere: the connections that were open are closed, and new ones are closed at once.
struct Vip {
    addr: SocketAddr,
    upstream: watch::Sender<Option<SocketAddr>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Vip {
    /// A new address on a free port of 127.0.0.1, forwarding to `upstream`.
    async fn start(upstream: SocketAddr) -> std::io::Result<Vip> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (upstream, watching) = watch::channel(Some(upstream));
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, watching.clone()));
            }
        });
        Ok(Vip { addr, upstream, accepting })
    }

    /// The address leaves its host (`None`) or comes up on `upstream`; open connections are
    /// closed either way.
    fn point(&self, upstream: Option<SocketAddr>) {
        self.upstream.send_replace(upstream);
    }
}

impl Drop for Vip {
    fn drop(&mut self) {
        self.accepting.abort();
        self.point(None);
    }
}

/// Forwards one connection to the current upstream until either side closes or the address
/// moves.
async fn forward(mut client: TcpStream, mut upstream: watch::Receiver<Option<SocketAddr>>) {
    let Some(to) = *upstream.borrow_and_update() else { return };
    let Ok(mut server) = TcpStream::connect(to).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    tokio::select! {
        _ = copy_bidirectional(&mut client, &mut server) => {}
        _ = upstream.changed() => {}
    }
}

/// One enqueue of a producer: what it submitted (its payload is unique), when, and what it
/// returned.
struct Submission {
    payload: Vec<u8>,
    started: Instant,
    returned: Instant,
    outcome: Result<String, (ErrorKind, bool, String)>,
}

/// What the run saw, and what the new primary holds afterwards.
#[derive(Debug, Default)]
struct Figures {
    /// Enqueues that returned `Ok`.
    acknowledged: usize,
    /// Enqueues that returned a definite error (not `CommitUnknown`), by kind.
    definite: BTreeMap<String, usize>,
    /// Enqueues that returned `CommitUnknown`.
    unknown: usize,
    /// Acknowledged tasks missing (or stored under another payload) after the failover.
    lost: Vec<String>,
    /// Tasks whose ack the runtime saw succeed (the broker's Completed notification) that are
    /// not completed afterwards.
    undone: Vec<String>,
    /// Acks the runtime saw succeed.
    acked: usize,
    /// Payloads whose enqueue returned a definite error, found stored.
    applied_after_error: Vec<String>,
    /// Payloads stored more than once.
    doubled: Vec<String>,
    /// Stored tasks that did not complete.
    unfinished: Vec<String>,
    /// Tasks stored on the new primary.
    stored: usize,
    /// Handler executions, and the tasks that ran more than once.
    executions: usize,
    ran_twice: usize,
    /// Stop of the primary, promotion, repoint (the failover's own steps).
    kill: Duration,
    promote: Duration,
    repoint: Duration,
    /// From the stop to the return of the first successful enqueue started once the primary
    /// was down (time to resume), and from the repoint to that return.
    resume: Option<Duration>,
    after_repoint: Option<Duration>,
    /// The longest enqueue call.
    longest: Duration,
}

impl Figures {
    fn print(&self, what: &str) {
        println!(
            "postgres failover ({what} standby): {} enqueues acknowledged, {} stored, lost {}, \
             acks OK {} (undone {}), definite enqueue errors {:?}, CommitUnknown {}, \
             {} executions ({} tasks ran twice or more); failover steps: stop -m immediate \
             {:?}, detection {DETECTION:?}, promote {:?}, clear synchronous_standby_names + \
             move the address {:?}; time to resume (stop to the first successful enqueue started after \
             it) {:?} ({:?} after the repoint); longest enqueue call {:?}",
            self.acknowledged,
            self.stored,
            self.lost.len(),
            self.acked,
            self.undone.len(),
            self.definite,
            self.unknown,
            self.executions,
            self.ran_twice,
            self.kill,
            self.promote,
            self.repoint,
            self.resume,
            self.after_repoint,
            self.longest,
        );
    }

    /// What holds with either replication: nothing stored twice, nothing applied behind a
    /// definite error, every stored task completed, and the workload resumed.
    fn assert_common(&self) -> Result<(), BoxError> {
        let Figures { applied_after_error, doubled, unfinished, .. } = self;
        assert!(
            applied_after_error.is_empty(),
            "applied after a definite error: {applied_after_error:?}"
        );
        assert!(doubled.is_empty(), "payloads stored twice: {doubled:?}");
        assert!(unfinished.is_empty(), "stored tasks that never completed: {unfinished:?}");
        assert!(self.resume.is_some(), "no enqueue succeeded after the failover");
        assert!(self.acknowledged >= BEFORE + AFTER, "only {} acknowledged", self.acknowledged);
        Ok(())
    }
}

/// The run: producers and a runtime through the virtual address, the failover once the
/// workload is under way, the producers stopped once enough enqueues started after it
/// succeeded, the runtime left to finish every stored task, then the checks.
async fn workload(pair: &Pair) -> Result<Figures, BoxError> {
    let vip = Vip::start(addr(pair.primary)).await?;
    let through = url(vip.addr.port());
    let producer = options(&through)?.connect().await?;
    producer.init(Default::default()).await?;
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let runs = Arc::new(Mutex::new(Vec::new()));
    let runtime = start_runtime(&through, &acked, &runs).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let after = Arc::new(Mutex::new(None::<Instant>));
    let fresh_ok = Arc::new(AtomicUsize::new(0));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (producer, stop) = (producer.clone(), stop.clone());
            let (after, fresh_ok) = (after.clone(), fresh_ok.clone());
            tokio::spawn(produce(p, producer, stop, after, fresh_ok))
        })
        .collect();

    let acks = acked.clone();
    let under_way = until("the workload before the failover", || {
        let oks = fresh_ok.load(Ordering::SeqCst);
        let acked = acks.lock().map(|a| a.len()).unwrap_or(0);
        oks >= BEFORE && acked >= BEFORE
    });
    under_way.await?;

    let mut figures = Figures::default();
    let stopped = Instant::now();
    script(&["kill", &pair.data("primary")?]).await?;
    vip.point(None);
    figures.kill = stopped.elapsed();
    // From here on the primary is gone: an enqueue started now that succeeds was written on
    // the promoted standby.
    let down = Instant::now();
    fresh_ok.store(0, Ordering::SeqCst);
    *after.lock().map_err(|_| "poisoned")? = Some(down);
    tokio::time::sleep(DETECTION).await;
    let t = Instant::now();
    script(&["promote", &pair.data("standby")?]).await?;
    figures.promote = t.elapsed();
    let t = Instant::now();
    clear_synchronous_standby_names(pair.standby).await?;
    vip.point(Some(addr(pair.standby)));
    let repointed = Instant::now();
    figures.repoint = repointed - t;

    until("enqueues after the failover", || fresh_ok.load(Ordering::SeqCst) >= AFTER).await?;
    stop.store(true, Ordering::SeqCst);
    let mut submissions = Vec::new();
    for p in producers {
        submissions.extend(p.await?);
    }

    let direct = options(&url(pair.standby))?.connect().await?;
    direct.init(Default::default()).await?;
    until_all_final(&direct).await?;
    let report = runtime.shutdown(Duration::from_secs(10)).await?;
    let stored = direct.list(&Filter { queue: QUEUE.into(), ..Filter::default() }).await?;
    producer.close().await?;
    direct.close().await?;
    drop(vip);
    let acked = acked.lock().map_err(|_| "poisoned")?.clone();
    let runs = runs.lock().map_err(|_| "poisoned")?.clone();
    println!("runtime shutdown: {report:?}");
    let times = Times { stopped, down, repointed };
    tally(&mut figures, &submissions, &stored, &acked, &runs, &times);
    Ok(figures)
}

/// A handle's options on `url`: a small pool, a 1 s connect timeout.
fn options(url: &str) -> Result<PgOptions, BoxError> {
    Ok(PgOptions::from_url(url)?.prefix("fo_").pool_size(4).connect_timeout(Duration::from_secs(1)))
}

/// A runtime whose handler records each execution and whose observer records each ack that
/// succeeded (the broker notifies `completed` once the ack is known to be applied).
async fn start_runtime(
    url: &str,
    acked: &Arc<Mutex<BTreeSet<String>>>,
    runs: &Arc<Mutex<Vec<String>>>,
) -> Result<Runtime, BoxError> {
    let broker: Arc<dyn Broker> = Arc::new(options(url)?.connect().await?);
    let (acked, runs) = (acked.clone(), runs.clone());
    let queue = QueueConfig::workers(4).lease_ttl(LEASE);
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
                    runs.push(ctx.id().to_owned());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok(ctx.payload().map(<[u8]>::to_vec))
            }
        })
        .start()
        .await?;
    Ok(runtime)
}

/// One producer: enqueues tasks with unique payloads until `stop`, recording every outcome;
/// counts in `fresh_ok` the successes of enqueues that started after the time in `after`
/// (all of them while it is unset).
async fn produce(
    p: usize,
    broker: PgBroker,
    stop: Arc<AtomicBool>,
    after: Arc<Mutex<Option<Instant>>>,
    fresh_ok: Arc<AtomicUsize>,
) -> Vec<Submission> {
    let mut done = Vec::new();
    for i in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let payload = format!("p{p}-{i}").into_bytes();
        let started = Instant::now();
        let task = Task::new(QUEUE, QUEUE).with_payload(payload.clone());
        let outcome = broker.enqueue(&task).await;
        let returned = Instant::now();
        let since = after.lock().ok().and_then(|a| *a);
        let outcome = match outcome {
            Ok(stored) => {
                if since.is_none_or(|at| started >= at) {
                    fresh_ok.fetch_add(1, Ordering::SeqCst);
                }
                Ok(stored.id)
            }
            Err(e) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Err((e.kind(), is_commit_unknown(&e), e.to_string()))
            }
        };
        done.push(Submission { payload, started, returned, outcome });
    }
    done
}

/// On the promoted standby: `synchronous_standby_names` came with the base backup and names a
/// standby the new primary does not have; left set, every commit would wait for it forever.
async fn clear_synchronous_standby_names(port: u16) -> Result<(), BoxError> {
    let mut conn = sqlx::PgConnection::connect(&url(port)).await?;
    sqlx::query("ALTER SYSTEM RESET synchronous_standby_names").execute(&mut conn).await?;
    sqlx::query("SELECT pg_reload_conf()").execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

/// Waits (up to [`WAIT_LIMIT`]) until `check` holds.
async fn until(what: &str, mut check: impl FnMut() -> bool) -> Result<(), BoxError> {
    let started = Instant::now();
    while !check() {
        if started.elapsed() > WAIT_LIMIT {
            return Err(format!("{what}: not reached within {WAIT_LIMIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Waits (up to [`WAIT_LIMIT`]) until every task of the queue is final on `direct`.
async fn until_all_final(direct: &PgBroker) -> Result<(), BoxError> {
    let started = Instant::now();
    let filter = Filter { queue: QUEUE.into(), ..Filter::default() };
    loop {
        let open = direct.list(&filter).await?.iter().filter(|t| !t.status.is_terminal()).count();
        if open == 0 {
            return Ok(());
        }
        if started.elapsed() > WAIT_LIMIT {
            return Err(format!("{open} tasks not final within {WAIT_LIMIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// When the primary's stop began, when it was down, and when the address was repointed.
struct Times {
    stopped: Instant,
    down: Instant,
    repointed: Instant,
}

/// Compares what the producers and the runtime were told with what the new primary holds.
fn tally(
    f: &mut Figures,
    submissions: &[Submission],
    stored: &[Task],
    acked: &BTreeSet<String>,
    runs: &[String],
    times: &Times,
) {
    let by_id: HashMap<&str, &Task> = stored.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut by_payload: HashMap<&[u8], usize> = HashMap::new();
    for t in stored {
        *by_payload.entry(t.payload.as_deref().unwrap_or_default()).or_default() += 1;
    }
    let name = |s: &Submission| String::from_utf8_lossy(&s.payload).into_owned();
    for s in submissions {
        f.longest = f.longest.max(s.returned - s.started);
        match &s.outcome {
            Ok(id) => {
                f.acknowledged += 1;
                if by_id.get(id.as_str()).is_none_or(|t| t.payload.as_deref() != Some(&s.payload)) {
                    f.lost.push(id.clone());
                }
                if s.started >= times.down
                    && f.resume.is_none_or(|r| s.returned - times.stopped < r)
                {
                    f.resume = Some(s.returned - times.stopped);
                    f.after_repoint = Some(s.returned.saturating_duration_since(times.repointed));
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
    let mut per_task: HashMap<&str, usize> = HashMap::new();
    for id in runs {
        *per_task.entry(id.as_str()).or_default() += 1;
    }
    f.executions = runs.len();
    f.ran_twice = per_task.values().filter(|n| **n > 1).count();
}
