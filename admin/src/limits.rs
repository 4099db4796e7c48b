//! [`Limits`]: what slow or many clients meet, so they cannot hold the server's connections
//! (or its file descriptors) forever.

use std::time::Duration;

/// The default [`Limits::header_timeout`]: 10 s.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default [`Limits::body_timeout`]: 30 s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// The listen backlog [`bind`](crate::bind) is usually given (`taskgate serve --backlog`'s
/// default): 4,096 connections may wait for their accept (Linux caps it at
/// `net.core.somaxconn`).
pub const DEFAULT_BACKLOG: u32 = 4096;
/// File descriptors the default [`Limits::max_connections`] leaves to the rest of the process
/// (the database's connections, files, the listener).
pub const RESERVED_FDS: u64 = 64;
/// The largest default [`Limits::max_connections`].
pub const MAX_DEFAULT_CONNECTIONS: usize = 10_000;

/// What slow or many clients meet.
///
/// ```
/// use std::time::Duration;
/// use taskgate_admin::{AdminConfig, Limits};
///
/// let limits = Limits { header_timeout: Duration::from_secs(5), ..Limits::default() };
/// let config = AdminConfig::new().with_limits(limits);
/// assert_eq!(config.limits().body_timeout, Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long [`serve`](crate::serve) waits for a request's line and headers, counted from
    /// the connection's start, or from the previous answer on a kept-alive connection; then it
    /// closes the connection without an answer. Default [`DEFAULT_HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// How long the [`router`](crate::router) waits for a request's whole body once its headers
    /// arrived; then it answers 408 (`request.timeout`) and the connection closes. Default
    /// [`DEFAULT_BODY_TIMEOUT`].
    pub body_timeout: Duration,
    /// How many connections [`serve`](crate::serve) holds open at once (at least 1). Further
    /// ones wait in the listen backlog, unaccepted, until one closes — which the two timeouts
    /// bound. Default: the process's soft open-files limit (`ulimit -n`) less
    /// [`RESERVED_FDS`], at least 16 and at most [`MAX_DEFAULT_CONNECTIONS`] (1,024 where the
    /// limit cannot be read).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: default_max_connections(),
        }
    }
}

/// The soft open-files limit less [`RESERVED_FDS`], from 16 to [`MAX_DEFAULT_CONNECTIONS`].
fn default_max_connections() -> usize {
    let soft = open_files_limit().unwrap_or(1024 + RESERVED_FDS);
    let usable = soft.saturating_sub(RESERVED_FDS).clamp(16, MAX_DEFAULT_CONNECTIONS as u64);
    usize::try_from(usable).unwrap_or(MAX_DEFAULT_CONNECTIONS)
}

#[cfg(unix)]
fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

#[cfg(not(unix))]
fn open_files_limit() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_connection_limit_leaves_descriptors_to_the_process() {
        let max = Limits::default().max_connections;
        assert!((16..=MAX_DEFAULT_CONNECTIONS).contains(&max), "{max}");
        if let Some(soft) = open_files_limit() {
            assert!(max as u64 + RESERVED_FDS <= soft.max(16 + RESERVED_FDS), "{max} of {soft}");
        }
    }
}
