//! The status transition table (contract §2.1, extensions §E5): one pure function every
//! backend calls before it writes a status.

use crate::{Error, Status};

/// True when a task may move from `from` to `to`.
///
/// | from \ to | pending | running | retrying | completed | failed | canceled | blocked |
/// |---|---|---|---|---|---|---|---|
/// | blocked   | wake |   |   |   |   | cancel, propagation, repair | |
/// | pending   |   | claim |   |   |   | cancel, propagation | |
/// | running   | requeue, reap, save_step |   | fail | ack | fail, reap | finish_canceled, reap, save_step | |
/// | retrying  |   | claim |   |   |   | cancel, propagation | |
/// | failed    | resume |   |   |   |   |   | resume |
/// | canceled  | resume |   |   |   |   |   | resume |
/// | completed |   |   |   |   |   |   | |
///
/// Terminal statuses have no outgoing edge except the operator's resume (§E5), which takes a
/// `failed` or `canceled` task back to `pending` or `blocked`.
pub const fn is_legal(from: Status, to: Status) -> bool {
    use Status::*;
    matches!(
        (from, to),
        (Blocked, Pending | Canceled)
            | (Pending, Running | Canceled)
            | (Running, Pending | Retrying | Completed | Failed | Canceled)
            | (Retrying, Running | Canceled)
            | (Failed | Canceled, Pending | Blocked)
    )
}

/// Checks a status write against the table; an illegal one is [`Error::IllegalTransition`].
pub fn transition(from: Status, to: Status) -> Result<(), Error> {
    if is_legal(from, to) {
        Ok(())
    } else {
        Err(Error::IllegalTransition { from, to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use Status::*;

    #[rstest]
    #[case(Blocked, Pending, true)]
    #[case(Blocked, Canceled, true)]
    #[case(Blocked, Running, false)]
    #[case(Blocked, Retrying, false)]
    #[case(Blocked, Completed, false)]
    #[case(Blocked, Failed, false)]
    #[case(Pending, Running, true)]
    #[case(Pending, Canceled, true)]
    #[case(Pending, Blocked, false)]
    #[case(Pending, Retrying, false)]
    #[case(Pending, Completed, false)]
    #[case(Pending, Failed, false)]
    #[case(Running, Pending, true)]
    #[case(Running, Retrying, true)]
    #[case(Running, Completed, true)]
    #[case(Running, Failed, true)]
    #[case(Running, Canceled, true)]
    #[case(Running, Blocked, false)]
    #[case(Running, Running, false)]
    #[case(Retrying, Running, true)]
    #[case(Retrying, Canceled, true)]
    #[case(Retrying, Pending, false)]
    #[case(Retrying, Completed, false)]
    #[case(Retrying, Failed, false)]
    #[case(Completed, Pending, false)]
    #[case(Completed, Running, false)]
    #[case(Completed, Blocked, false)]
    #[case(Completed, Canceled, false)]
    #[case(Failed, Pending, true)]
    #[case(Failed, Blocked, true)]
    #[case(Failed, Running, false)]
    #[case(Failed, Canceled, false)]
    #[case(Canceled, Pending, true)]
    #[case(Canceled, Blocked, true)]
    #[case(Canceled, Running, false)]
    #[case(Canceled, Failed, false)]
    fn transition_table(#[case] from: Status, #[case] to: Status, #[case] legal: bool) {
        assert_eq!(is_legal(from, to), legal, "{from} -> {to}");
        assert_eq!(transition(from, to).is_ok(), legal);
    }

    #[test]
    fn no_status_moves_to_itself() {
        for s in Status::ALL {
            assert!(!is_legal(s, s), "{s} -> {s}");
        }
    }

    #[test]
    fn illegal_transition_names_both_ends() {
        let err = transition(Completed, Running).unwrap_err();
        assert_eq!(err.to_string(), "illegal transition: completed -> running");
    }
}
