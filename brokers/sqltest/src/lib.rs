//! Test support for taskgate's server SQL backends (PostgreSQL, MySQL/MariaDB), kept out of the
//! shipped engine crate: never a dependency of a shipped crate, only a dev-dependency of the
//! backends' tests.
//!
//! * [`cutproxy`]: a TCP proxy that cuts a broker's connection where a transaction commits, and
//!   the lost-outcome and reachability checks every server backend runs through it;
//! * [`races`]: the shape the backends' race rigs (`brokertest::races`) share.

pub mod cutproxy;
pub mod races;
