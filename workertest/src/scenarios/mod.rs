//! The scenarios, by area. Each is `pub async fn wNN_name(factory) -> CaseResult`.

mod ahead;
mod basics;
mod cancel;
mod deps;
mod leases;
mod lifecycle;
mod quota;
mod retries;
mod schedules;

pub use ahead::*;
pub use basics::*;
pub use cancel::*;
pub use deps::*;
pub use leases::*;
pub use lifecycle::*;
pub use quota::*;
pub use retries::*;
pub use schedules::*;

use taskgate::{ErrorKind, Status};
use taskgate_worker::{Client, Error};

use crate::TestResult;

/// The broker error kind inside a runtime error.
fn kind_of<T>(result: &Result<T, Error>) -> Option<ErrorKind> {
    result.as_ref().err().and_then(Error::broker_kind)
}

/// How many tasks of `kind` have `status`.
async fn count(client: &Client, kind: &str, status: Status) -> TestResult<u64> {
    let counts = client.overview().await?;
    Ok(counts.get(kind).and_then(|c| c.get(&status)).copied().unwrap_or(0))
}
