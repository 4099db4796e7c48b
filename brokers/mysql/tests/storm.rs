//! Deadlocks are absorbed, never reported: the concurrent-propagation storm of contract §10.4
//! and a mixed load (4 inserters, 4 claimers, 4 completers, 20 s by default,
//! `TASKGATE_STORM_SECS` overrides), each actor on its own handle like separate processes.
//! No 1213 or 1205 — no error at all — may reach a caller; the retries the loop absorbed are
//! counted and printed.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use futures::future::try_join_all;
use taskgate::{BoxError, Broker, BrokerOptions, Failure, OnParentFailure, Status, Task};
use taskgate_mysql::testing::{MySqlFactory, MySqlStorage};
use taskgate_mysql::MySqlBroker;
use tokio::sync::mpsc;

async fn handles(storage: &MySqlStorage, n: usize) -> Result<Vec<Arc<MySqlBroker>>, BoxError> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(common::handle(storage, BrokerOptions::default()).await?);
    }
    Ok(out)
}

fn retries(handles: &[Arc<MySqlBroker>]) -> u64 {
    handles.iter().map(|h| h.tx_retries()).sum()
}

async fn close_all(handles: &[Arc<MySqlBroker>]) -> Result<(), BoxError> {
    for h in handles {
        h.close().await?;
    }
    Ok(())
}

/// One round: two claimed parents with twelve fail_fast children; both parents fail while two
/// reapers run five times each. Returns the retries absorbed.
async fn storm_round(round: usize, h: &[Arc<MySqlBroker>]) -> Result<(), BoxError> {
    let queue = format!("storm-{round}");
    let (p1, p2) = (format!("r{round:02}-p1"), format!("r{round:02}-p2"));
    h[0].enqueue(&Task::new("parent", queue.as_str()).with_id(p1.as_str())).await?;
    h[0].enqueue(&Task::new("parent", queue.as_str()).with_id(p2.as_str())).await?;
    let claimed = h[0].dequeue_many(&[queue.as_str()], 2).await?;
    let token = |id: &str| claimed.iter().find(|t| t.id == id).map(|t| t.lease_token.clone());
    let (t1, t2) = (token(&p1).ok_or("p1 not claimed")?, token(&p2).ok_or("p2 not claimed")?);
    let children: Vec<Task> = (0..12)
        .map(|c| {
            Task::new("child", "storm-children")
                .with_id(format!("r{round:02}-c{c:02}"))
                .with_depends_on([p1.as_str(), p2.as_str()])
                .with_on_parent_failure(OnParentFailure::FailFast)
        })
        .collect();
    h[1].enqueue_many(&children).await?;

    let fail1 = h[0].fail(&p1, &t1, Failure::skip("boom"));
    let fail2 = h[1].fail(&p2, &t2, Failure::skip("boom"));
    let reap = |b: Arc<MySqlBroker>| async move {
        for _ in 0..5 {
            b.reap_expired().await?;
        }
        Ok::<(), taskgate::Error>(())
    };
    let storm = async { tokio::join!(fail1, fail2, reap(h[2].clone()), reap(h[3].clone())) };
    let what = format!("round {round}: two fails and two reapers");
    let (a, b, c, d) = within(WAIT_LIMIT, what, storm).await;
    a?;
    b?;
    c?;
    d?;
    for p in [&p1, &p2] {
        assert_eq!(h[0].get(p).await?.status, Status::Failed, "{p}");
    }
    for child in &children {
        let got = h[0].get(&child.id).await?;
        assert_eq!(got.status, Status::Canceled, "{} is {}", child.id, got.status);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_propagation_storm_leaks_no_error() -> Result<(), BoxError> {
    within(TEST_LIMIT, "concurrent_propagation_storm_leaks_no_error", async move {
        let factory = MySqlFactory::from_env().with_pool_size(3);
        let Some(storage) = common::storage_with("concurrent_propagation_storm", factory).await
        else {
            return Ok(());
        };
        let h = handles(&storage, 4).await?;
        for round in 0..20 {
            storm_round(round, &h).await?;
        }
        eprintln!(
            "propagation storm: 20 rounds, {} deadlock/lock-timeout retries absorbed",
            retries(&h)
        );
        close_all(&h).await?;
        storage.drop_tables().await
    })
    .await
}

/// Shared state of the mixed load.
struct Load {
    stop: AtomicBool,
    recent: Mutex<Vec<String>>,
    inserted: AtomicU64,
    completed: AtomicU64,
    errors: Mutex<Vec<String>>,
}

impl Load {
    fn error(&self, who: &str, e: &taskgate::Error) {
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).push(format!("{who}: {e}"));
    }

    /// None, one or two recent tasks as parents (fan-in), by `n`.
    fn parents(&self, n: u64) -> Vec<String> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let len = recent.len();
        let wanted = usize::try_from(n % 3).unwrap_or(0);
        let start = usize::try_from(n).unwrap_or(0);
        (0..wanted.min(len)).filter_map(|k| recent.get((start + 7 * k) % len).cloned()).collect()
    }

    fn remember(&self, id: String) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() >= 64 {
            recent.remove(0);
        }
        recent.push(id);
    }
}

const QUEUES: [&str; 2] = ["mix-a", "mix-b"];

fn mixed_task(load: &Load, n: u64) -> Task {
    let queue = QUEUES[usize::try_from(n).unwrap_or(0) % 2];
    let mut task = Task::new("mixed", queue).with_max_retry(1).with_depends_on(load.parents(n));
    if n % 2 == 0 {
        task = task.with_on_parent_failure(OnParentFailure::IgnoreParentFailure);
    }
    task
}

/// Enqueues single tasks and batches of three, a third roots, the rest with one or two recent
/// parents (which completers are finishing at the same time).
async fn inserter(who: usize, b: Arc<MySqlBroker>, load: Arc<Load>) {
    let mut n = 0u64;
    while !load.stop.load(Ordering::Relaxed) {
        n += 1;
        let batch: Vec<Task> = (0..1 + 2 * (n % 2)).map(|k| mixed_task(&load, n * 3 + k)).collect();
        match b.enqueue_many(&batch).await {
            Ok(stored) => {
                load.inserted
                    .fetch_add(u64::try_from(stored.len()).unwrap_or(0), Ordering::Relaxed);
                for t in stored {
                    load.remember(t.id);
                }
            }
            Err(e) => load.error(&format!("inserter {who}"), &e),
        }
    }
}

async fn claimer(who: usize, b: Arc<MySqlBroker>, load: Arc<Load>, out: mpsc::Sender<Task>) {
    let queue = QUEUES[who % 2];
    while !load.stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_millis(200), b.dequeue_many(&[queue], 5)).await {
            Err(_) => {}
            Ok(Err(e)) => load.error(&format!("claimer {who}"), &e),
            Ok(Ok(tasks)) => {
                for t in tasks {
                    if out.send(t).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

async fn completer(
    who: usize,
    b: Arc<MySqlBroker>,
    load: Arc<Load>,
    input: Arc<tokio::sync::Mutex<mpsc::Receiver<Task>>>,
) {
    let mut n = 0u64;
    loop {
        let next = input.lock().await.recv().await;
        let Some(t) = next else { return };
        n += 1;
        let done = match n % 10 {
            0 => {
                b.fail(&t.id, &t.lease_token, Failure::business("flaky", taskgate::Timestamp::ZERO))
                    .await
            }
            1 => b.fail(&t.id, &t.lease_token, Failure::skip("skip")).await,
            2 => b.requeue(&t.id, &t.lease_token).await,
            _ => b.ack(&t.id, &t.lease_token, Some(b"{}".to_vec())).await,
        };
        match done {
            Ok(()) => {
                load.completed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => load.error(&format!("completer {who}"), &e),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_load_leaks_no_deadlock() -> Result<(), BoxError> {
    within(TEST_LIMIT, "mixed_load_leaks_no_deadlock", async move {
        let secs: u64 =
            std::env::var("TASKGATE_STORM_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
        let factory = MySqlFactory::from_env().with_pool_size(2);
        let Some(storage) = common::storage_with("mixed_load", factory).await else { return Ok(()) };
        let h = handles(&storage, 12).await?;
        let load = Arc::new(Load {
            stop: AtomicBool::new(false),
            recent: Mutex::new(Vec::new()),
            inserted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            errors: Mutex::new(Vec::new()),
        });
        let (tx, rx) = mpsc::channel(64);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let mut producers = Vec::new();
        for i in 0..4 {
            producers.push(tokio::spawn(inserter(i, h[i].clone(), load.clone())));
            producers.push(tokio::spawn(claimer(i, h[4 + i].clone(), load.clone(), tx.clone())));
        }
        drop(tx);
        let completers: Vec<_> = (0..4)
            .map(|i| tokio::spawn(completer(i, h[8 + i].clone(), load.clone(), rx.clone())))
            .collect();
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        load.stop.store(true, Ordering::Relaxed);
        within(WAIT_LIMIT, "the inserters and claimers to stop", try_join_all(producers)).await?;
        within(WAIT_LIMIT, "the completers to stop", try_join_all(completers)).await?;
        let elapsed = started.elapsed().as_secs_f64();
        let errors = load.errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (inserted, completed) =
            (load.inserted.load(Ordering::Relaxed), load.completed.load(Ordering::Relaxed));
        eprintln!(
            "mixed load {elapsed:.1} s: {inserted} inserted, {completed} claimed and completed, {} retries absorbed, {} errors",
            retries(&h),
            errors.len()
        );
        assert!(errors.is_empty(), "errors reached callers: {:#?}", &errors[..errors.len().min(10)]);
        assert!(inserted > 0 && completed > 0, "the load did nothing");
        let counts = h[0].counts().await?;
        let running: u64 = counts.values().filter_map(|by| by.get(&Status::Running)).sum();
        assert_eq!(running, 0, "every claimed task was completed, failed or requeued");
        close_all(&h).await?;
        storage.drop_tables().await
    })
    .await
}
