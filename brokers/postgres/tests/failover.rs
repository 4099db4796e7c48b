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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brokertest::{within, WAIT_LIMIT};
use sqlx::Connection as _;
use taskgate::{BoxError, Broker};
use taskgate_postgres::PgOptions;
use taskgate_sql::is_commit_unknown;
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use workertest::fault::{first_ok_after, longest, until, Figures, Ledger, Progress, Workload};

/// The script that builds, fails over and removes pairs.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../ci/pg-standby.sh");
/// The workload: producers' payloads `p<producer>-<n>` on queue `failover`.
const WORKLOAD: Workload = Workload {
    queue: "failover",
    label: "p",
    pause: Duration::from_millis(20),
    commit_unknown: is_commit_unknown,
};
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
    let run = run?;
    run.print("synchronous");
    run.assert_common();
    run.figures.assert_nothing_lost();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_standby_failover_loss_is_measured() -> Result<(), BoxError> {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(pair) = Pair::build(Replication::Async).await? else { return Ok(()) };
    let run = within(WAIT_LIMIT * 3, "the asynchronous failover run", workload(&pair)).await;
    pair.remove().await?;
    let run = run?;
    run.print("asynchronous");
    // What was lost is measured, not asserted; what holds whatever the replication does:
    // every stored task completes, and a definite error never hides an applied write.
    run.assert_common();
    Ok(())
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

/// What the run saw ([`Figures`], the kit's) and the failover's own timings.
#[derive(Debug, Default)]
struct Run {
    figures: Figures,
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

impl Run {
    fn print(&self, what: &str) {
        println!(
            "postgres failover ({what} standby): {}; failover steps: stop -m immediate {:?}, \
             detection {DETECTION:?}, promote {:?}, clear synchronous_standby_names + move the \
             address {:?}; time to resume (stop to the first successful enqueue started after \
             it) {:?} ({:?} after the repoint); longest enqueue call {:?}",
            self.figures.summary(),
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
    fn assert_common(&self) {
        self.figures.assert_consistent(BEFORE + AFTER);
        assert!(self.resume.is_some(), "no enqueue succeeded after the failover");
    }
}

/// The run: producers and a runtime through the virtual address, the failover once the
/// workload is under way, the producers stopped once enough enqueues started after it
/// succeeded, the runtime left to finish every stored task, then the checks.
async fn workload(pair: &Pair) -> Result<Run, BoxError> {
    let vip = Vip::start(addr(pair.primary)).await?;
    let through = url(vip.addr.port());
    let producer: Arc<dyn Broker> = Arc::new(options(&through)?.connect().await?);
    producer.init(Default::default()).await?;
    let ledger = Arc::new(Ledger::default());
    let broker = Arc::new(options(&through)?.connect().await?);
    let runtime = WORKLOAD.runtime(0, broker, (4, LEASE), &ledger).await?;

    // No node is watched: `on_node` stays unused.
    let progress = Progress::watching(usize::MAX);
    let producers: Vec<_> =
        (0..PRODUCERS).map(|p| WORKLOAD.produce(p, producer.clone(), progress.clone())).collect();

    until("the workload before the failover", WAIT_LIMIT, || {
        progress.fresh.count() >= BEFORE && ledger.acked() >= BEFORE
    })
    .await?;

    let mut run = Run::default();
    let stopped = Instant::now();
    script(&["kill", &pair.data("primary")?]).await?;
    vip.point(None);
    run.kill = stopped.elapsed();
    // From here on the primary is gone: an enqueue started now that succeeds was written on
    // the promoted standby.
    let down = Instant::now();
    progress.fresh.mark(down);
    tokio::time::sleep(DETECTION).await;
    let t = Instant::now();
    script(&["promote", &pair.data("standby")?]).await?;
    run.promote = t.elapsed();
    let t = Instant::now();
    clear_synchronous_standby_names(pair.standby).await?;
    vip.point(Some(addr(pair.standby)));
    let repointed = Instant::now();
    run.repoint = repointed - t;

    until("enqueues after the failover", WAIT_LIMIT, || progress.fresh.count() >= AFTER).await?;
    progress.stop();
    let mut submissions = Vec::new();
    for p in producers {
        submissions.extend(p.await?);
    }

    let direct = options(&url(pair.standby))?.connect().await?;
    direct.init(Default::default()).await?;
    WORKLOAD.until_all_final(&direct, WAIT_LIMIT).await?;
    let report = runtime.shutdown(Duration::from_secs(10)).await?;
    let stored = WORKLOAD.stored(&direct).await?;
    producer.close().await?;
    direct.close().await?;
    drop(vip);
    println!("runtime shutdown: {report:?}");
    run.figures = Figures::tally(&submissions, &stored, &ledger);
    if let Some(first) = first_ok_after(&submissions, down, |_| true) {
        run.resume = Some(first.returned - stopped);
        run.after_repoint = Some(first.returned.saturating_duration_since(repointed));
    }
    run.longest = longest(&submissions, |_| true);
    Ok(run)
}

/// A handle's options on `url`: a small pool, a 1 s connect timeout.
fn options(url: &str) -> Result<PgOptions, BoxError> {
    Ok(PgOptions::from_url(url)?.prefix("fo_").pool_size(4).connect_timeout(Duration::from_secs(1)))
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
