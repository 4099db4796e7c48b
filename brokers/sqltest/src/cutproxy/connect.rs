//! How long connecting may take (issue 38), on real sockets: [`check_connect_bounds`].

use std::sync::Arc;
use std::time::Duration;

use taskgate::{BoxError, BoxFuture, Broker, ErrorKind};

use tokio::net::TcpListener;

use super::proxy::closed_port;

/// How a server backend's tests open a handle on a URL for [`check_connect_bounds`]: with
/// `connect` (which reaches the server) or `connect_lazy` (which does not), and the connect
/// timeout to set, if any.
pub struct Connectors {
    /// `url` with `user@127.0.0.1:port` for a port.
    pub url: fn(u16) -> String,
    /// `Options::from_url(url)`, the timeout set, `.connect()`; the handle dropped.
    pub connect: fn(String, Option<Duration>) -> BoxFuture<'static, taskgate::Result<()>>,
    /// `Options::from_url(url)`, the timeout set, `.connect_lazy()`.
    pub lazy: fn(String, Option<Duration>) -> taskgate::Result<Arc<dyn Broker>>,
}

/// The bound issue 38 sets: a refused connection is reported well within it.
const AT_ONCE: Duration = Duration::from_secs(5);
/// The connect timeout the silent-server check configures.
const SILENT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long connecting may take (issue 38), on real sockets: a refused connection (a port
/// bound and released) is reported at once with its cause by `connect` and by `init` after
/// `connect_lazy` (again when repeated), and `close` does not wait; a server that accepts TCP
/// and never answers is given up after the configured connect timeout (1 s) by both, with an
/// error that names it ("did not answer a connection attempt within 1 s"). Returns the four
/// times measured.
pub async fn check_connect_bounds(c: &Connectors) -> Result<[Duration; 4], BoxError> {
    let url = (c.url)(closed_port()?);
    let cause = "Connection refused";
    let started = std::time::Instant::now();
    let connect = tokio::time::timeout(AT_ONCE, (c.connect)(url.clone(), None)).await;
    let refused_connect = expect_failure("connect", connect, started, cause, AT_ONCE)?;
    let lazy = (c.lazy)(url, None)?;
    let started = std::time::Instant::now();
    let init = tokio::time::timeout(AT_ONCE, lazy.init(Default::default())).await;
    let refused_init = expect_failure("connect_lazy + init", init, started, cause, AT_ONCE)?;
    // A call after a failed init still names the cause at once.
    let started = std::time::Instant::now();
    let again = tokio::time::timeout(AT_ONCE, lazy.init(Default::default())).await;
    expect_failure("init again", again, started, cause, AT_ONCE)?;
    let close = tokio::time::timeout(AT_ONCE, lazy.close()).await;
    close.map_err(|_| "close of a handle that never connected hung")??;

    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let url = (c.url)(listener.local_addr()?.port());
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let cause = "did not answer a connection attempt within 1 s";
    let bound = SILENT_TIMEOUT + AT_ONCE;
    let started = std::time::Instant::now();
    let connect = tokio::time::timeout(bound, (c.connect)(url.clone(), Some(SILENT_TIMEOUT))).await;
    let silent_connect = expect_failure("connect", connect, started, cause, bound)?;
    let lazy = (c.lazy)(url, Some(SILENT_TIMEOUT))?;
    let started = std::time::Instant::now();
    let init = tokio::time::timeout(bound, lazy.init(Default::default())).await;
    let silent_init = expect_failure("connect_lazy + init", init, started, cause, bound)?;
    for (what, took) in [("connect", silent_connect), ("init", silent_init)] {
        if took < SILENT_TIMEOUT {
            return Err(format!("{what} gave up after {took:?}, before its timeout").into());
        }
    }
    let close = tokio::time::timeout(bound, lazy.close()).await;
    close.map_err(|_| "close after a silent server hung")??;
    silent.abort();
    Ok([refused_connect, refused_init, silent_connect, silent_init])
}

/// `result` must be a `Backend` error whose text contains `cause`, within `bound` of
/// `started`; returns how long it took.
fn expect_failure<T: std::fmt::Debug>(
    what: &str,
    result: Result<taskgate::Result<T>, tokio::time::error::Elapsed>,
    started: std::time::Instant,
    cause: &str,
    bound: Duration,
) -> Result<Duration, BoxError> {
    let took = started.elapsed();
    match result.map_err(|_| format!("{what}: no answer within {bound:?}"))? {
        Err(e) if e.is(ErrorKind::Backend) && e.to_string().contains(cause) => {}
        other => {
            let got = format!("{other:?}");
            return Err(
                format!("{what}: expected a Backend error naming {cause:?}, got {got}").into()
            );
        }
    }
    if took >= bound {
        return Err(format!("{what} took {took:?}, more than {bound:?}").into());
    }
    Ok(took)
}
