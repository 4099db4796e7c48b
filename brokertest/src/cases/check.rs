//! The small checks every case file shares: pass-through with a named step, error-kind and
//! invalid-input assertions, and stored-ID sets.

use std::collections::BTreeSet;

use taskgate::{BoxError, Broker, Error, ErrorKind, Filter};

/// Passes an operation's value through, or fails the case with the step that went wrong.
pub(crate) fn must<T>(result: taskgate::Result<T>, step: &str) -> Result<T, BoxError> {
    result.map_err(|e| format!("{step}: {e}").into())
}

/// Asserts that `result` is an error of `kind`; `step` names the task and the call.
pub(crate) fn expect_kind<T: std::fmt::Debug>(
    result: taskgate::Result<T>,
    kind: ErrorKind,
    step: &str,
) {
    match result {
        Err(e) => assert_eq!(e.kind(), kind, "{step}: expected {kind}, got error {e}"),
        Ok(v) => panic!("{step}: expected {kind}, got success {v:?}"),
    }
}

/// Asserts `result` failed with `kind` and returns the error (shared by this area's cases).
pub(crate) fn expect_err<T>(result: taskgate::Result<T>, kind: ErrorKind, what: &str) -> Error {
    match result {
        Err(e) if e.kind() == kind => e,
        Err(e) => panic!("{what}: expected {kind}, got {}: {e}", e.kind()),
        Ok(_) => panic!("{what}: expected {kind}, but it succeeded"),
    }
}

/// Asserts `result` is `InvalidInput` naming `field`.
pub(crate) fn expect_invalid<T>(result: taskgate::Result<T>, field: &str, what: &str) {
    match expect_err(result, ErrorKind::InvalidInput, what) {
        Error::InvalidInput { field: got, .. } => {
            assert_eq!(got, field, "{what}: InvalidInput names the wrong field");
        }
        other => panic!("{what}: InvalidInput of another shape: {other:?}"),
    }
}

/// The IDs of every stored task, sorted.
pub(crate) async fn stored_ids(broker: &dyn Broker) -> Result<BTreeSet<String>, Error> {
    Ok(broker.list(&Filter::default()).await?.into_iter().map(|t| t.id).collect())
}

/// A sorted set of IDs from string literals.
pub(crate) fn ids(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}
