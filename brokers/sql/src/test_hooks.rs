//! What tests outside the engine see of its statements (feature `test-hooks`; no shipped binary
//! enables it): the marker comments that open the one-statement writes, by which the test proxy
//! that cuts connections (`sqltest::cutproxy`) finds where such a write commits (an autocommit
//! statement sends no `COMMIT`).

/// The comment that opens the one-statement ack.
pub const ONE_STATEMENT_ACK: &str = crate::ops::ack::autocommit::AUTOCOMMIT_ACK_MARKER;
/// The comment that opens the one-statement enqueue.
pub const ONE_STATEMENT_ENQUEUE: &str = crate::ops::enqueue::AUTOCOMMIT_ENQUEUE_MARKER;
/// The comment that opens the one-statement claim (without the space that follows it).
pub const ONE_STATEMENT_CLAIM: &str = crate::ops::claim::AUTOCOMMIT_CLAIM_MARKER.trim_ascii_end();
