//! Shared pieces of the criterion benches: the runtime, the group settings (short, since the
//! database benches are slow), and the failure policy of a bench binary (stop with a message).

#![allow(dead_code, reason = "each bench binary uses part of this module")]

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::BenchmarkGroup;
use taskgate::{PruneRequest, Timestamp};

use benches::backend::Bed;

/// Longest a single measured drain may take before the bench fails.
pub(crate) const SAFETY: Duration = Duration::from_secs(120);

/// The benches' runtime; a bench cannot run without one.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    or_die(benches::runtime(), "tokio runtime")
}

/// Unwraps `result` or stops the bench binary with `what` and the error.
pub(crate) fn or_die<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => {
            eprintln!("taskgate benches: {what} failed: {e}");
            std::process::exit(1);
        }
    }
}

/// Ten samples, short warm-up and measurement (the database benches take seconds each).
pub(crate) fn configure(group: &mut BenchmarkGroup<'_, WallTime>, test_mode: bool) {
    group.sample_size(10);
    if !test_mode {
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(3));
    }
}

/// Stops the bench if a drain completed a different number of jobs than it filled.
pub(crate) fn check_jobs(jobs: u64, expected: u64) {
    if jobs != expected {
        eprintln!("taskgate benches: completed {jobs} jobs, expected {expected}");
        std::process::exit(1);
    }
}

/// Deletes every finished task of the bed (between benchmarks, so tables stay small).
pub(crate) async fn prune(bed: &Bed) -> benches::Result<u64> {
    let far = Timestamp::from_millis(i64::MAX / 2);
    Ok(bed.broker.prune(PruneRequest { finished_before: far, ..PruneRequest::default() }).await?)
}
