//! Handlers as the runtime stores them: typed, stepwise and raw handlers erased to one shape
//! (context in, outcome out), and the wrapper that turns a handler's panic into a failure.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use taskgate::Step;

use crate::job::{decode, encode};
use crate::{Job, JobContext, JobError};

/// A boxed, sendable future.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a successful handler run asks the runtime to write.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Ack with this result.
    Done(Option<Vec<u8>>),
    /// Save this checkpoint and run again later (§E3).
    Step(Step),
}

/// A registered handler, erased.
pub(crate) type Handler =
    Arc<dyn Fn(JobContext) -> BoxFuture<Result<Outcome, JobError>> + Send + Sync + 'static>;

/// What a stepwise handler returns: one more step (its checkpoint is saved and the task runs
/// again after `step.delay`), or the final output.
///
/// ```
/// use std::time::Duration;
/// use taskgate_worker::{Step, Stepped};
///
/// let next: Stepped<u32> = Stepped::Step(Step {
///     cursor: Some(b"page-2".to_vec()),
///     progress: Some(50),
///     message: "half way".into(),
///     delay: Duration::ZERO,
/// });
/// assert!(matches!(next, Stepped::Step(_)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stepped<O> {
    /// Save this checkpoint; the next run gets its cursor and progress.
    Step(Step),
    /// Finished with this output.
    Done(O),
}

/// Erases a typed handler: decodes the payload (a payload that does not decode fails the
/// task at once), runs it, encodes the output.
pub(crate) fn typed<J, F, Fut>(handler: F) -> Handler
where
    J: Job,
    F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<J::Output, JobError>> + Send + 'static,
{
    stepwise::<J, _, _>(move |job, ctx| {
        let run = handler(job, ctx);
        async move { run.await.map(Stepped::Done) }
    })
}

/// Erases a stepwise handler.
pub(crate) fn stepwise<J, F, Fut>(handler: F) -> Handler
where
    J: Job,
    F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Stepped<J::Output>, JobError>> + Send + 'static,
{
    Arc::new(move |ctx: JobContext| {
        let job = match decode::<J>("payload", J::KIND, ctx.payload()) {
            Ok(job) => job,
            Err(e) => return Box::pin(async move { Err(JobError::skip(JobError::msg(e))) }),
        };
        let run = handler(job, ctx);
        Box::pin(async move {
            match run.await? {
                Stepped::Step(step) => Ok(Outcome::Step(step)),
                Stepped::Done(output) => {
                    let bytes = encode("result", J::KIND, &output).map_err(JobError::msg)?;
                    Ok(Outcome::Done(Some(bytes)))
                }
            }
        })
    })
}

/// Erases a raw-bytes handler.
pub(crate) fn raw<F, Fut>(handler: F) -> Handler
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Vec<u8>>, JobError>> + Send + 'static,
{
    Arc::new(move |ctx: JobContext| {
        let run = handler(ctx);
        Box::pin(async move { run.await.map(Outcome::Done) })
    })
}

/// Polls a handler future, turning a panic into `Err(panic text)`.
pub(crate) struct CatchUnwind(pub(crate) BoxFuture<Result<Outcome, JobError>>);

impl Future for CatchUnwind {
    type Output = Result<Outcome, JobError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => Poll::Ready(Err(JobError::panic(&panic_text(&*payload)))),
        }
    }
}

/// The text of a panic payload (`&str` or `String`, else a placeholder).
fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
