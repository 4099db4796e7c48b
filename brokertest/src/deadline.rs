//! Deadlines for tests: a wait that hangs fails its test with what it was waiting for, instead
//! of holding the whole suite. They are hang detectors, generous on a loaded 2-core machine,
//! never timing assertions (a correct run finishes far inside every one of them).

use std::fmt::Display;
use std::future::IntoFuture;
use std::io::Write as _;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

/// The bound on one wait that is not a single expected broker result (those get
/// [`SAFETY_TIMEOUT`](crate::SAFETY_TIMEOUT)): joining a worker or a loop of calls, another
/// session's lock, a child process, opening or removing storage, closing a handle.
pub const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// The bound on one whole backend-specific test (contract cases have
/// [`CASE_TIMEOUT`](crate::CASE_TIMEOUT), each model or history run its own).
pub const TEST_LIMIT: Duration = Duration::from_secs(600);

/// Awaits `fut`; panics with `what` when it has not finished within `limit` (the future is
/// dropped).
///
/// ```ignore
/// let n = within(WAIT_LIMIT, "the reaper task", reaper).await??;
/// ```
pub async fn within<F: IntoFuture>(limit: Duration, what: impl Display, fut: F) -> F::Output {
    match tokio::time::timeout(limit, fut).await {
        Ok(output) => output,
        Err(_) => {
            panic!("still waiting for {what} after {limit:?} (a hang: correct runs take far less)")
        }
    }
}

/// A hard stop for a long run on its own runtime (the model test, the history checker): when
/// the run has not ended within its limit, it writes what the run was doing last and ends the
/// test process with a failure. Tokio timeouts cannot fire while every runtime thread is
/// blocked; this thread can. Dropping the watchdog disarms it.
pub(crate) struct Watchdog {
    doing: Arc<Mutex<String>>,
    disarm: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Arms a watchdog for `run` (e.g. "model test against mysql").
    pub(crate) fn arm(run: String, limit: Duration) -> Watchdog {
        let doing = Arc::new(Mutex::new("starting".to_owned()));
        let (disarm, disarmed) = mpsc::channel::<()>();
        let last = doing.clone();
        let thread = std::thread::Builder::new()
            .name("taskgate-watchdog".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = disarmed.recv_timeout(limit) {
                    let last = last.lock().map_or_else(|p| p.into_inner().clone(), |d| d.clone());
                    // The stderr handle, not `eprintln!`: libtest captures the print macros.
                    let _ = writeln!(
                        std::io::stderr(),
                        "\n*** {run} still running after {limit:?}, last: {last} (a hang: \
                         correct runs take far less); ending the test process ***\n"
                    );
                    std::process::exit(101);
                }
            })
            .ok();
        Watchdog { doing, disarm: Some(disarm), thread }
    }

    /// Records what the run does now (reported when the limit passes).
    pub(crate) fn doing(&self, what: impl Into<String>) {
        *self.doing.lock().unwrap_or_else(PoisonError::into_inner) = what.into();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.disarm.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
