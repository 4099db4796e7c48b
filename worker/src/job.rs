//! Typed jobs: the [`Job`] trait a payload type implements, the typed [`JobId`] a submit
//! returns, and the [`SubmitOptions`] of one submission (runtime spec §12.2).

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use taskgate::Timestamp;

use crate::{Error, Result};

/// A kind of work: its payload type, its name, where it runs by default and what it returns.
///
/// Everything but [`Job::KIND`] and [`Job::Output`] has a default, so a derive (or three
/// lines by hand) implements it. Payloads and outputs travel as JSON.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use taskgate_worker::Job;
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String }
///
/// impl Job for SendEmail {
///     const KIND: &'static str = "send_email";
///     const QUEUE: Option<&'static str> = Some("email");
///     type Output = ();
/// }
/// assert_eq!(SendEmail::MAX_RETRY, 25);
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The task type stored with every execution; selects the handler.
    const KIND: &'static str;
    /// The queue this job runs on unless the config routes its kind elsewhere; `None` means
    /// the queue named like the kind.
    const QUEUE: Option<&'static str> = None;
    /// Business retries allowed when a submit does not say (`attempts > MAX_RETRY` fails it).
    const MAX_RETRY: u32 = DEFAULT_MAX_RETRY;
    /// What a successful run returns (stored as the task's result, read by `wait`).
    type Output: Serialize + DeserializeOwned + Send + 'static;
}

/// The retry budget a submit gives when neither the job nor the options say otherwise: the
/// core's [`taskgate::DEFAULT_MAX_RETRY`] (25), the same a raw [`taskgate::Task::new`] gets.
pub use taskgate::DEFAULT_MAX_RETRY;

/// The execution ID of a submitted job, typed by the job so [`Client::wait`](crate::Client::wait)
/// knows what the result decodes to.
pub struct JobId<J> {
    id: String,
    job: PhantomData<fn() -> J>,
}

impl<J> JobId<J> {
    /// Types an execution ID you got elsewhere (a list, a parent's `depends_on`).
    pub fn from_raw(id: impl Into<String>) -> Self {
        JobId { id: id.into(), job: PhantomData }
    }

    /// The execution ID.
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// The execution ID, owned.
    pub fn into_string(self) -> String {
        self.id
    }
}

impl<J> Clone for JobId<J> {
    fn clone(&self) -> Self {
        JobId::from_raw(self.id.clone())
    }
}

impl<J> PartialEq for JobId<J> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<J> Eq for JobId<J> {}

impl<J> fmt::Debug for JobId<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("JobId").field(&self.id).finish()
    }
}

impl<J> fmt::Display for JobId<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

impl<J> AsRef<str> for JobId<J> {
    fn as_ref(&self) -> &str {
        &self.id
    }
}

impl<J> From<JobId<J>> for String {
    fn from(id: JobId<J>) -> String {
        id.id
    }
}

/// How one submission is stored: idempotency key, delay, retries, parents, owner, priority.
///
/// ```
/// use std::time::Duration;
/// use taskgate_worker::SubmitOptions;
///
/// let opts = SubmitOptions::new()
///     .business_key("invoice-42")
///     .delay(Duration::from_secs(30))
///     .max_retry(5)
///     .depends_on("01J0PARENT0000000000000000")
///     .owner("billing")
///     .priority(-10);
/// assert_eq!(opts.parents(), ["01J0PARENT0000000000000000"]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct SubmitOptions {
    pub(crate) business_key: String,
    pub(crate) delay: Option<Duration>,
    pub(crate) run_at: Option<Timestamp>,
    pub(crate) max_retry: Option<u32>,
    pub(crate) depends_on: Vec<String>,
    pub(crate) ignore_parent_failure: bool,
    pub(crate) owner: String,
    pub(crate) priority: Option<i16>,
}

impl SubmitOptions {
    /// No options: no key, run now, the job's retry budget, no parents.
    pub fn new() -> Self {
        SubmitOptions::default()
    }

    /// Idempotency key: a second submit with the same key fails with `TaskExists` naming the
    /// key's latest execution (contract §8.2).
    pub fn business_key(mut self, key: impl Into<String>) -> Self {
        self.business_key = key.into();
        self
    }

    /// Runs no earlier than `delay` from now (converted with the runtime's clock at submit).
    /// [`SubmitOptions::run_at`] wins when both are given.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Runs no earlier than `at`.
    pub fn run_at(mut self, at: Timestamp) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Business retries allowed (overrides [`Job::MAX_RETRY`]).
    pub fn max_retry(mut self, max_retry: u32) -> Self {
        self.max_retry = Some(max_retry);
        self
    }

    /// Waits for this parent (an execution ID); may be given several times.
    pub fn depends_on(mut self, parent: impl AsRef<str>) -> Self {
        self.depends_on.push(parent.as_ref().to_owned());
        self
    }

    /// Runs even when a parent fails or is cancelled (default: cancelled with it).
    pub fn ignore_parent_failure(mut self) -> Self {
        self.ignore_parent_failure = true;
        self
    }

    /// Records who submitted it (filterable in `list`).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Claim priority: smaller runs first within the queues a worker claims from
    /// (`taskgate::MIN_PRIORITY`..=`taskgate::MAX_PRIORITY`, −100 to 100; default 0). Out of
    /// range is `InvalidInput { field: "priority" }` at submit.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The parents given so far.
    pub fn parents(&self) -> &[String] {
        &self.depends_on
    }
}

/// Encodes a job's payload as JSON.
pub(crate) fn encode<T: Serialize>(what: &'static str, kind: &str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|source| Error::Payload {
        what,
        kind: kind.to_owned(),
        source,
    })
}

/// Decodes a job's payload or result from JSON (absent bytes read as `null`).
pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    kind: &str,
    bytes: Option<&[u8]>,
) -> Result<T> {
    serde_json::from_slice(bytes.unwrap_or(b"null")).map_err(|source| Error::Payload {
        what,
        kind: kind.to_owned(),
        source,
    })
}
