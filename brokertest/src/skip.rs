//! The one place that decides what an unreachable database means for a test: a loud line on
//! stderr (the test passes without having run), or, with `TASKGATE_REQUIRE_DB=1` (CI), a
//! failure. Every generated test, the model and history runs, the races and the backends' own
//! tests go through it.

use std::fmt::Display;
use std::io::Write as _;

use taskgate::BoxError;

use crate::Unavailable;

/// True when `TASKGATE_REQUIRE_DB=1`: an unreachable database fails instead of skipping.
pub fn require_db() -> bool {
    std::env::var("TASKGATE_REQUIRE_DB").is_ok_and(|v| v == "1")
}

/// Marks the reason of an [`Unavailable`] the person running the tests chose on purpose (a
/// topology they opted out of, such as `TASKGATE_GALERA=0`): it skips loudly even under
/// `TASKGATE_REQUIRE_DB=1`, which forbids only skips nobody asked for.
pub const OPTED_OUT: &str = "opted out:";

/// Skips `what` because of `why`: writes `*** SKIPPED what: why ***` on stderr, or panics
/// when `TASKGATE_REQUIRE_DB=1` forbids skipping (unless `why` says it was [`OPTED_OUT`]).
pub fn skip(what: &str, why: &dyn Display) {
    let opted_out = why.to_string().contains(OPTED_OUT);
    if require_db() && !opted_out {
        panic!("{what}: {why} (TASKGATE_REQUIRE_DB=1 forbids skipping)");
    }
    // Written to the stderr handle, not with `eprintln!`: the test harness captures the print
    // macros of passing tests, and a skip must be seen.
    let hint = if opted_out { "" } else { " (set TASKGATE_REQUIRE_DB=1 to fail instead)" };
    let _ = writeln!(std::io::stderr(), "\n*** SKIPPED {what}: {why}{hint} ***");
}

/// `got`, or `Ok(None)` after [`skip`] when it failed with [`Unavailable`] (a panic under
/// `TASKGATE_REQUIRE_DB=1`); any other error is returned.
pub fn or_skip<T>(what: &str, got: Result<T, BoxError>) -> Result<Option<T>, BoxError> {
    match got {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.downcast_ref::<Unavailable>().is_some() => {
            skip(what, &e);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
