//! Performs a [`Call`] on the backend under test: translates model names to the backend's
//! generated IDs and lease tokens and back, learns new ones as the backend hands them out,
//! and turns every result into an [`Outcome`] the model's can be compared with.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use taskgate::{AckItem, Broker, Error, Filter, ManualClock, Task};

use super::call::{Call, Detail, Fault, Outcome};
use crate::SAFETY_TIMEOUT;

/// How long a blocking dequeue that should wait is watched before it is dropped.
const WAIT_WINDOW: Duration = Duration::from_millis(15);

/// A two-way name map (model name ⇄ backend value).
#[derive(Debug, Default)]
struct NameMap {
    to_backend: HashMap<String, String>,
    to_model: HashMap<String, String>,
}

impl NameMap {
    fn learn(&mut self, model: &str, backend: &str) {
        self.to_backend.insert(model.to_owned(), backend.to_owned());
        self.to_model.insert(backend.to_owned(), model.to_owned());
    }

    fn backend(&self, model: &str) -> String {
        self.to_backend.get(model).cloned().unwrap_or_else(|| model.to_owned())
    }

    fn model(&self, backend: &str) -> String {
        self.to_model.get(backend).cloned().unwrap_or_else(|| backend.to_owned())
    }

    fn knows_backend(&self, backend: &str) -> bool {
        self.to_model.contains_key(backend)
    }
}

/// A generated model name (`g7`) the backend has not handed out: an ID no task has.
fn is_generated(name: &str) -> bool {
    name.strip_prefix('g').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The backend side of a model case.
pub(crate) struct Exec {
    broker: Arc<dyn Broker>,
    clock: ManualClock,
    ids: NameMap,
    tokens: NameMap,
}

impl Exec {
    pub(crate) fn new(broker: Arc<dyn Broker>, clock: ManualClock) -> Self {
        Exec { broker, clock, ids: NameMap::default(), tokens: NameMap::default() }
    }

    fn id(&self, name: &str) -> String {
        match self.ids.to_backend.get(name) {
            Some(id) => id.clone(),
            None if is_generated(name) => format!("0NOSUCHID{name}"),
            None => name.to_owned(),
        }
    }

    fn token(&self, token: &str) -> String {
        self.tokens.backend(token)
    }

    fn to_backend(&self, task: &Task) -> Task {
        let mut t = task.clone();
        if !t.id.is_empty() {
            t.id = self.id(&t.id);
        }
        t.depends_on = t.depends_on.iter().map(|p| self.id(p)).collect();
        t
    }

    /// A backend snapshot in model space. Unknown IDs and tokens stay visible (`?token`).
    pub(crate) fn to_model(&self, task: &Task) -> Task {
        let mut t = task.clone();
        t.id = self.ids.model(&t.id);
        if !t.replay_of.is_empty() {
            t.replay_of = self.ids.model(&t.replay_of);
        }
        t.depends_on = t.depends_on.iter().map(|p| self.ids.model(p)).collect();
        t.last_error = self.parent_text(&t.last_error);
        if !t.lease_token.is_empty() {
            t.lease_token = match self.tokens.to_model.get(&t.lease_token) {
                Some(name) => name.clone(),
                None => format!("?{}", t.lease_token),
            };
        }
        t
    }

    /// `parent <id> failed|canceled` names a parent: in model space, its model name.
    fn parent_text(&self, text: &str) -> String {
        let words: Vec<&str> = text.split(' ').collect();
        match words.as_slice() {
            ["parent", id, outcome] => format!("parent {} {outcome}", self.ids.model(id)),
            _ => text.to_owned(),
        }
    }

    /// Performs `call` on the backend; `expected` is the model's outcome, used to pair new
    /// IDs and tokens and to decide how long a blocking dequeue is watched. `Err` means the
    /// backend hung.
    pub(crate) async fn perform(
        &mut self,
        call: &Call,
        expected: &Outcome,
    ) -> Result<Outcome, String> {
        let raw = self.run(call, expected).await?;
        self.learn(expected, &raw);
        Ok(self.translate(raw))
    }

    async fn run(&self, call: &Call, expected: &Outcome) -> Result<Outcome, String> {
        let b = &*self.broker;
        Ok(match call {
            Call::Enqueue(t) => task(bounded("enqueue", b.enqueue(&self.to_backend(t))).await?),
            Call::EnqueueMany(ts) => {
                let ts: Vec<Task> = ts.iter().map(|t| self.to_backend(t)).collect();
                tasks(bounded("enqueue_many", b.enqueue_many(&ts)).await?)
            }
            Call::TryDequeueMany { queues, max } => {
                tasks(bounded("try_dequeue_many", b.try_dequeue_many(&refs(queues), *max)).await?)
            }
            Call::TryDequeue { queues } => {
                match bounded("try_dequeue", b.try_dequeue(&refs(queues))).await? {
                    Ok(t) => Outcome::MaybeTask(t),
                    Err(e) => Outcome::Failed(raw_fault(&e)),
                }
            }
            Call::Dequeue { queues } => self.dequeue(queues, expected).await,
            Call::Ack { id, token, result } => {
                unit(bounded("ack", b.ack(&self.id(id), &self.token(token), result.clone())).await?)
            }
            Call::AckMany(items) => self.ack_many(items).await?,
            Call::Fail { id, token, failure } => unit(
                bounded("fail", b.fail(&self.id(id), &self.token(token), failure.clone())).await?,
            ),
            Call::Cancel { id } => unit(bounded("cancel", b.cancel(&self.id(id))).await?),
            Call::FinishCanceled { id, token } => unit(
                bounded("finish_canceled", b.finish_canceled(&self.id(id), &self.token(token)))
                    .await?,
            ),
            Call::Requeue { id, token } => {
                unit(bounded("requeue", b.requeue(&self.id(id), &self.token(token))).await?)
            }
            Call::Heartbeat { id, token } => {
                unit(bounded("heartbeat", b.heartbeat(&self.id(id), &self.token(token))).await?)
            }
            Call::SaveStep { id, token, step } => unit(
                bounded("save_step", b.save_step(&self.id(id), &self.token(token), step.clone()))
                    .await?,
            ),
            other => self.run_admin(other).await?,
        })
    }

    async fn run_admin(&self, call: &Call) -> Result<Outcome, String> {
        let b = &*self.broker;
        Ok(match call {
            Call::PauseQueue(q) => unit(bounded("pause_queue", b.pause_queue(q)).await?),
            Call::ResumeQueue(q) => unit(bounded("resume_queue", b.resume_queue(q)).await?),
            Call::Resume { id } => task(bounded("resume", b.resume(&self.id(id))).await?),
            Call::Replay(request) => {
                let mut request = request.clone();
                if !request.execution_id.is_empty() {
                    request.execution_id = self.id(&request.execution_id);
                }
                task(bounded("replay", b.replay(request)).await?)
            }
            Call::Prune(request) => count(bounded("prune", b.prune(request.clone())).await?),
            Call::Reap => count(bounded("reap_expired", b.reap_expired()).await?),
            Call::Advance(d) => {
                self.clock.advance(*d);
                Outcome::Done
            }
            Call::Lapse(d) => {
                self.clock.advance(*d);
                count(bounded("reap_expired", b.reap_expired()).await?)
            }
            Call::Get { id } => task(bounded("get", b.get(&self.id(id))).await?),
            Call::List(filter) => tasks(bounded("list", b.list(filter)).await?),
            _ => return Err(format!("the executor has no route for {call:?}")),
        })
    }

    async fn dequeue(&self, queues: &[String], expected: &Outcome) -> Outcome {
        let window = if matches!(expected, Outcome::Blocks) { WAIT_WINDOW } else { SAFETY_TIMEOUT };
        match tokio::time::timeout(window, self.broker.dequeue(&refs(queues))).await {
            Err(_) => Outcome::Blocks,
            Ok(r) => task(r),
        }
    }

    async fn ack_many(&self, items: &[AckItem]) -> Result<Outcome, String> {
        let items: Vec<AckItem> = items
            .iter()
            .map(|i| AckItem {
                id: self.id(&i.id),
                token: self.token(&i.token),
                result: i.result.clone(),
            })
            .collect();
        Ok(match bounded("ack_many", self.broker.ack_many(&items)).await? {
            Ok(results) => Outcome::Items(
                results
                    .into_iter()
                    .map(|r| r.map_err(|e| Fault::from_error(&e, str::to_owned)))
                    .collect(),
            ),
            Err(e) => Outcome::Failed(Fault::from_error(&e, str::to_owned)),
        })
    }

    /// Pairs snapshots the model and the backend returned at the same position: a new
    /// generated ID or lease token on the backend side gets the model's name.
    fn learn(&mut self, expected: &Outcome, raw: &Outcome) {
        for (want, got) in snapshots(expected).iter().zip(snapshots(raw)) {
            if is_generated(&want.id)
                && !self.ids.to_backend.contains_key(&want.id)
                && !self.ids.knows_backend(&got.id)
            {
                self.ids.learn(&want.id, &got.id);
            }
            let same_task = self.ids.model(&got.id) == want.id;
            let fresh = !got.lease_token.is_empty() && !self.tokens.knows_backend(&got.lease_token);
            if same_task && fresh && !want.lease_token.is_empty() {
                self.tokens.learn(&want.lease_token, &got.lease_token);
            }
        }
    }

    fn translate(&self, raw: Outcome) -> Outcome {
        let fault = |f: Fault| match f.detail {
            Detail::Existing { key, id, status } => Fault {
                kind: f.kind,
                detail: Detail::Existing { key, id: self.ids.model(&id), status },
            },
            _ => f,
        };
        match raw {
            Outcome::Task(t) => Outcome::Task(self.to_model(&t)),
            Outcome::Tasks(ts) => Outcome::Tasks(ts.iter().map(|t| self.to_model(t)).collect()),
            Outcome::MaybeTask(t) => Outcome::MaybeTask(t.map(|t| self.to_model(&t))),
            Outcome::Failed(f) => Outcome::Failed(fault(f)),
            Outcome::Items(items) => {
                Outcome::Items(items.into_iter().map(|r| r.map_err(fault)).collect())
            }
            other => other,
        }
    }

    /// Every task the backend stores, in list order, in model space.
    pub(crate) async fn list_all(&self) -> Result<Vec<Task>, String> {
        match bounded("list", self.broker.list(&Filter::default())).await? {
            Ok(ts) => Ok(ts.iter().map(|t| self.to_model(t)).collect()),
            Err(e) => Err(format!("list failed: {e}")),
        }
    }

    pub(crate) fn broker(&self) -> &dyn Broker {
        &*self.broker
    }
}

fn snapshots(outcome: &Outcome) -> Vec<Task> {
    match outcome {
        Outcome::Task(t) | Outcome::MaybeTask(Some(t)) => vec![t.clone()],
        Outcome::Tasks(ts) => ts.clone(),
        _ => Vec::new(),
    }
}

/// The bound on one backend call of a model or history step (a hang detector, generous on a
/// loaded machine; not the contract's 5 s for an expected claim, which [`Exec`] keeps).
pub(crate) const CALL_LIMIT: Duration = Duration::from_secs(30);

/// Runs a backend call (`what`: its name) with [`CALL_LIMIT`]: a hang fails the case, naming
/// the call, instead of holding the suite.
pub(crate) async fn bounded<T>(what: &str, call: impl Future<Output = T>) -> Result<T, String> {
    bounded_by(CALL_LIMIT, what, call).await
}

/// `fut` within `limit`, or an error naming `what`.
pub(crate) async fn bounded_by<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("no answer to {what} within {limit:?}"))
}

fn refs(queues: &[String]) -> Vec<&str> {
    queues.iter().map(String::as_str).collect()
}

fn raw_fault(e: &Error) -> Fault {
    Fault::from_error(e, str::to_owned)
}

fn task(r: taskgate::Result<Task>) -> Outcome {
    r.map_or_else(|e| Outcome::Failed(raw_fault(&e)), Outcome::Task)
}

fn tasks(r: taskgate::Result<Vec<Task>>) -> Outcome {
    r.map_or_else(|e| Outcome::Failed(raw_fault(&e)), Outcome::Tasks)
}

fn unit(r: taskgate::Result<()>) -> Outcome {
    r.map_or_else(|e| Outcome::Failed(raw_fault(&e)), |()| Outcome::Done)
}

fn count(r: taskgate::Result<u64>) -> Outcome {
    r.map_or_else(|e| Outcome::Failed(raw_fault(&e)), Outcome::Count)
}
