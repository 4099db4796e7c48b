//! The fault-workload kit, shared by the tests that break a database topology under load
//! (`brokers/postgres/tests/failover.rs`: a primary stopped and its standby promoted;
//! `brokers/mysql/tests/galera_nodekill.rs`: a Galera node SIGKILLed): producers enqueueing
//! unique payloads and recording what each enqueue returned, a worker runtime per node whose
//! handler records each execution and whose observer records each ack seen to succeed (the
//! [`Ledger`]), and the [`Figures`] both tests print and check — what was acknowledged, lost,
//! applied behind a definite error, stored twice, left unfinished or run twice.
//!
//! The tests keep what is theirs: the topology, the fault, when it strikes, and the timing
//! figures of their own steps.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use taskgate::{BoxError, Broker, ErrorKind, Filter, Status, Task};
use taskgate_worker::{Config, QueueConfig, Runtime};
use tokio::task::JoinHandle;

/// How often the waits of a run look again.
const POLL: Duration = Duration::from_millis(20);

/// The workload's shape: its queue (and task type), how producers name their payloads, how
/// long a producer pauses after a failed enqueue, and how to tell a `CommitUnknown` (the
/// outcome of the write is not known) from a definite error.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// The queue and task type.
    pub queue: &'static str,
    /// Payloads are `<label><node>-<n>`, unique in the run.
    pub label: &'static str,
    /// The pause after a failed enqueue.
    pub pause: Duration,
    /// True for an error that leaves the write's outcome unknown.
    pub commit_unknown: fn(&taskgate::Error) -> bool,
}

/// Why an enqueue returned no ID.
#[derive(Clone, Debug)]
pub struct Refused {
    /// The error's kind.
    pub kind: ErrorKind,
    /// The write's outcome is unknown ([`Workload::commit_unknown`]).
    pub commit_unknown: bool,
    /// The error's text.
    pub text: String,
}

/// One enqueue of a producer: what it submitted (its payload is unique), through which node,
/// when, and what it returned.
#[derive(Clone, Debug)]
pub struct Submission {
    /// The producer's node.
    pub node: usize,
    /// The unique payload.
    pub payload: Vec<u8>,
    /// When the call started and returned.
    pub started: Instant,
    /// When the call returned.
    pub returned: Instant,
    /// The stored task's ID, or why there is none.
    pub outcome: Result<String, Refused>,
}

impl Submission {
    /// The call's duration.
    pub fn took(&self) -> Duration {
        self.returned - self.started
    }

    fn name(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }
}

/// Successful enqueues counted from a mark: on every node (before the first mark: all of
/// them), or on one node (none before the mark).
#[derive(Debug)]
pub struct Since {
    node: Option<usize>,
    mark: Mutex<Option<Instant>>,
    ok: AtomicUsize,
}

impl Since {
    /// Every node's successes (all of them until [`Since::mark`]).
    pub fn any() -> Since {
        Since { node: None, mark: Mutex::new(None), ok: AtomicUsize::new(0) }
    }

    /// Node `node`'s successes of enqueues started after the mark (none before it).
    pub fn node(node: usize) -> Since {
        Since { node: Some(node), ..Since::any() }
    }

    /// Counts from zero again, the successes of enqueues started at `at` or later.
    pub fn mark(&self, at: Instant) {
        self.ok.store(0, Ordering::SeqCst);
        *lock(&self.mark) = Some(at);
    }

    /// The successes counted.
    pub fn count(&self) -> usize {
        self.ok.load(Ordering::SeqCst)
    }

    fn saw(&self, node: usize, started: Instant) {
        let mark = *lock(&self.mark);
        let counts = match mark {
            Some(at) => started >= at,
            None => self.node.is_none(),
        };
        if counts && self.node.is_none_or(|n| n == node) {
            self.ok.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// What the producers share with the run: the counts it waits on, the stop, and each node's
/// last enqueue error (for a failure's message).
#[derive(Debug)]
pub struct Progress {
    /// Successes on any node (see [`Since::any`]).
    pub fresh: Since,
    /// Successes on one node after a mark (see [`Since::node`]), when the run watches one.
    pub on_node: Since,
    stop: AtomicBool,
    last_error: Mutex<BTreeMap<usize, String>>,
}

impl Progress {
    /// Progress whose [`Progress::on_node`] counts node `watched`'s successes.
    pub fn watching(watched: usize) -> Arc<Progress> {
        Arc::new(Progress {
            fresh: Since::any(),
            on_node: Since::node(watched),
            stop: AtomicBool::new(false),
            last_error: Mutex::default(),
        })
    }

    /// Stops the producers (each after its call in flight).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// The last enqueue error each node's producer saw.
    pub fn last_errors(&self) -> BTreeMap<usize, String> {
        lock(&self.last_error).clone()
    }
}

/// What the runtimes saw: the acks that succeeded (the broker's `completed` notification, sent
/// once the ack is known to be applied) and every execution, with its runtime's node.
#[derive(Debug, Default)]
pub struct Ledger {
    acked: Mutex<BTreeSet<String>>,
    runs: Mutex<Vec<(usize, String)>>,
}

impl Ledger {
    /// Acks seen to succeed so far.
    pub fn acked(&self) -> usize {
        lock(&self.acked).len()
    }

    /// The executions so far: the runtime's node and the task.
    pub fn runs(&self) -> Vec<(usize, String)> {
        lock(&self.runs).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Workload {
    /// Starts a producer on `node`: it enqueues tasks with unique payloads through `broker`
    /// until [`Progress::stop`], recording every outcome; its join handle returns them.
    pub fn produce(
        self,
        node: usize,
        broker: Arc<dyn Broker>,
        progress: Arc<Progress>,
    ) -> JoinHandle<Vec<Submission>> {
        tokio::spawn(async move {
            let mut done = Vec::new();
            for i in 0.. {
                if progress.stop.load(Ordering::SeqCst) {
                    break;
                }
                done.push(self.submit(node, i, &*broker, &progress).await);
            }
            done
        })
    }

    async fn submit(&self, node: usize, i: u64, broker: &dyn Broker, p: &Progress) -> Submission {
        let payload = format!("{}{node}-{i}", self.label).into_bytes();
        let started = Instant::now();
        let task = Task::new(self.queue, self.queue).with_payload(payload.clone());
        let outcome = broker.enqueue(&task).await;
        let returned = Instant::now();
        let outcome = match outcome {
            Ok(stored) => {
                p.fresh.saw(node, started);
                p.on_node.saw(node, started);
                Ok(stored.id)
            }
            Err(e) => {
                lock(&p.last_error).insert(node, e.to_string());
                tokio::time::sleep(self.pause).await;
                let commit_unknown = (self.commit_unknown)(&e);
                Err(Refused { kind: e.kind(), commit_unknown, text: e.to_string() })
            }
        };
        Submission { node, payload, started, returned, outcome }
    }

    /// Starts a runtime of `workers` with lease `lease` on `broker` for node `node`, whose
    /// handler records each execution in `ledger` (and returns the payload after 2 ms) and
    /// whose observer records each ack that succeeded.
    pub async fn runtime(
        self,
        node: usize,
        broker: Arc<dyn Broker>,
        (workers, lease): (u32, Duration),
        ledger: &Arc<Ledger>,
    ) -> Result<Runtime, BoxError> {
        let (acked, runs) = (ledger.clone(), ledger.clone());
        let queue = QueueConfig::workers(workers).lease_ttl(lease);
        let runtime = Runtime::builder(broker)
            .config(Config::new().queue(self.queue, queue))
            .on_state_change(move |task| {
                if task.status == Status::Completed {
                    lock(&acked.acked).insert(task.id.clone());
                }
            })
            .register_raw(self.queue, move |ctx| {
                lock(&runs.runs).push((node, ctx.id().to_owned()));
                async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    Ok(ctx.payload().map(<[u8]>::to_vec))
                }
            })
            .start()
            .await?;
        Ok(runtime)
    }

    /// The workload's tasks on `reader`.
    pub async fn stored(&self, reader: &dyn Broker) -> Result<Vec<Task>, BoxError> {
        Ok(reader.list(&Filter { queue: self.queue.into(), ..Filter::default() }).await?)
    }

    /// Waits (up to `limit`) until every task of the workload is final on `reader`.
    pub async fn until_all_final(&self, reader: &dyn Broker, limit: Duration) -> Result<(), BoxError> {
        let started = Instant::now();
        loop {
            let open = self.stored(reader).await?.iter().filter(|t| !t.status.is_terminal()).count();
            if open == 0 {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(format!("{open} tasks not final within {limit:?}").into());
            }
            tokio::time::sleep(POLL * 5).await;
        }
    }
}

/// Waits (up to `limit`) until `check` holds.
pub async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) -> Result<(), BoxError> {
    let started = Instant::now();
    while !check() {
        if started.elapsed() > limit {
            return Err(format!("{what}: not reached within {limit:?}").into());
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// The first successful enqueue (by its return) among `submissions` that started at `since`
/// or later and passes `filter`.
pub fn first_ok_after(
    submissions: &[Submission],
    since: Instant,
    filter: impl Fn(&Submission) -> bool,
) -> Option<&Submission> {
    submissions
        .iter()
        .filter(|s| s.outcome.is_ok() && s.started >= since && filter(s))
        .min_by_key(|s| s.returned)
}

/// The longest enqueue call among `submissions` that pass `filter`.
pub fn longest(submissions: &[Submission], filter: impl Fn(&Submission) -> bool) -> Duration {
    submissions.iter().filter(|s| filter(s)).map(Submission::took).max().unwrap_or_default()
}

/// What producers and runtimes were told, compared with what the database holds afterwards.
#[derive(Debug, Default)]
pub struct Figures {
    /// Enqueues that returned `Ok`.
    pub acknowledged: usize,
    /// Enqueues that returned a definite error (not `CommitUnknown`), by kind.
    pub definite: BTreeMap<String, usize>,
    /// Enqueues that returned `CommitUnknown`.
    pub unknown: usize,
    /// Acknowledged tasks missing (or stored under another payload) afterwards.
    pub lost: Vec<String>,
    /// Tasks whose ack a runtime saw succeed that are not completed afterwards.
    pub undone: Vec<String>,
    /// Acks the runtimes saw succeed.
    pub acked: usize,
    /// Payloads whose enqueue returned a definite error, found stored.
    pub applied_after_error: Vec<String>,
    /// Payloads stored more than once.
    pub doubled: Vec<String>,
    /// Stored tasks that did not complete.
    pub unfinished: Vec<String>,
    /// Tasks stored.
    pub stored: usize,
    /// Handler executions.
    pub executions: usize,
    /// Tasks that ran more than once.
    pub ran_twice: usize,
    /// Tasks that ran more often than their lost leases allow (1 + `lease_lost`): a second
    /// holder of one claim.
    pub over_run: Vec<String>,
}

impl Figures {
    /// Compares `submissions` and the runtimes' `ledger` with the `stored` tasks.
    pub fn tally(submissions: &[Submission], stored: &[Task], ledger: &Ledger) -> Figures {
        let by_id: HashMap<&str, &Task> = stored.iter().map(|t| (t.id.as_str(), t)).collect();
        let mut by_payload: HashMap<&[u8], usize> = HashMap::new();
        for t in stored {
            *by_payload.entry(t.payload.as_deref().unwrap_or_default()).or_default() += 1;
        }
        let mut f = Figures { stored: stored.len(), ..Figures::default() };
        for s in submissions {
            match &s.outcome {
                Ok(id) => {
                    f.acknowledged += 1;
                    let kept = by_id.get(id.as_str()).map(|t| t.payload.as_deref());
                    if kept != Some(Some(s.payload.as_slice())) {
                        f.lost.push(id.clone());
                    }
                }
                Err(refused) if refused.commit_unknown => f.unknown += 1,
                Err(refused) => {
                    *f.definite.entry(format!("{:?}", refused.kind)).or_default() += 1;
                    if by_payload.contains_key(s.payload.as_slice()) {
                        f.applied_after_error.push(format!("{}: {}", s.name(), refused.text));
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
        let acked = lock(&ledger.acked);
        f.acked = acked.len();
        f.undone = acked
            .iter()
            .filter(|id| by_id.get(id.as_str()).is_none_or(|t| t.status != Status::Completed))
            .cloned()
            .collect();
        let runs = ledger.runs();
        f.executions = runs.len();
        let per_task = runs_per_task(&runs);
        f.ran_twice = per_task.values().filter(|n| **n > 1).count();
        f.over_run = per_task
            .iter()
            .filter(|(id, n)| {
                let allowed = |t: &&Task| 1 + usize::try_from(t.lease_lost).unwrap_or(0);
                by_id.get(*id).is_some_and(|t| **n > allowed(t))
            })
            .map(|(id, n)| format!("{id}: {n} runs"))
            .collect();
        f
    }

    /// The figures every fault test prints, as one clause.
    pub fn summary(&self) -> String {
        format!(
            "{} enqueues acknowledged, {} stored, lost {}, acks OK {} (undone {}), definite \
             enqueue errors {:?}, CommitUnknown {}, {} executions ({} tasks ran twice or more)",
            self.acknowledged,
            self.stored,
            self.lost.len(),
            self.acked,
            self.undone.len(),
            self.definite,
            self.unknown,
            self.executions,
            self.ran_twice,
        )
    }

    /// What holds whatever the fault: nothing stored twice, nothing applied behind a definite
    /// error, every stored task completed, and at least `acknowledged` enqueues acknowledged.
    pub fn assert_consistent(&self, acknowledged: usize) {
        let Figures { applied_after_error, doubled, unfinished, .. } = self;
        assert!(
            applied_after_error.is_empty(),
            "applied after a definite error: {applied_after_error:?}"
        );
        assert!(doubled.is_empty(), "payloads stored twice: {doubled:?}");
        assert!(unfinished.is_empty(), "stored tasks that never completed: {unfinished:?}");
        assert!(self.acknowledged >= acknowledged, "only {} acknowledged", self.acknowledged);
    }

    /// Nothing acknowledged was lost: every acknowledged enqueue is stored, every ack seen to
    /// succeed stays completed.
    pub fn assert_nothing_lost(&self) {
        assert_eq!(self.lost.len(), 0, "acknowledged enqueues lost: {:?}", self.lost);
        assert_eq!(self.undone.len(), 0, "acks reported OK undone: {:?}", self.undone);
    }
}

/// How many times each task ran.
pub fn runs_per_task(runs: &[(usize, String)]) -> HashMap<&str, usize> {
    let mut per_task: HashMap<&str, usize> = HashMap::new();
    for (_, id) in runs {
        *per_task.entry(id.as_str()).or_default() += 1;
    }
    per_task
}
