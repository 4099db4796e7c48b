//! How long connecting may take (issue 38): a refused connection is reported at once with its
//! cause by `connect` and by `init` after `connect_lazy` (again when repeated), and `close`
//! does not wait; a server that accepts TCP and never answers is given up after the configured
//! connect timeout by both, with an error that names that timeout. Both on real sockets: a port bound and released (nothing
//! listens), and a listener that accepts and never writes.

use std::time::{Duration, Instant};

use taskgate::{BoxError, Broker, BrokerOptions, ErrorKind};
use taskgate_postgres::PgOptions;
use tokio::net::TcpListener;

/// The bound the issue sets: a refused connection must be reported well within it.
const AT_ONCE: Duration = Duration::from_secs(5);
/// The connect timeout the silent-server test configures.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A port on 127.0.0.1 nothing listens on: bound by a listener, which is then dropped.
fn refused_port() -> Result<u16, BoxError> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let port = listener.local_addr()?.port();
    drop(listener);
    Ok(port)
}

/// A server that accepts every connection and never sends a byte; the accepted sockets stay
/// open while the task runs.
async fn silent_server() -> Result<(u16, tokio::task::JoinHandle<()>), BoxError> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    Ok((port, task))
}

fn url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/test")
}

/// Checks that `result` is a `Backend` error whose text contains `cause`, and that it came
/// within `bound` of `started`.
fn expect_failure<T: std::fmt::Debug>(
    what: &str,
    result: Result<taskgate::Result<T>, tokio::time::error::Elapsed>,
    started: Instant,
    cause: &str,
    bound: Duration,
) -> Result<Duration, BoxError> {
    let took = started.elapsed();
    let result = result.map_err(|_| format!("{what}: no answer within {bound:?}"))?;
    match result {
        Err(e) if e.is(ErrorKind::Backend) && e.to_string().contains(cause) => {}
        other => {
            return Err(
                format!("{what}: expected a Backend error naming {cause:?}, got {other:?}").into()
            )
        }
    }
    assert!(took < bound, "{what} took {took:?}, more than {bound:?}");
    eprintln!("{what}: {took:?}");
    Ok(took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_reported_at_once_by_connect_and_init() -> Result<(), BoxError> {
    let url = url(refused_port()?);
    let cause = "Connection refused";

    let started = Instant::now();
    let connect = tokio::time::timeout(AT_ONCE, PgOptions::from_url(&url)?.connect()).await;
    expect_failure("connect", connect, started, cause, AT_ONCE)?;

    let lazy = PgOptions::from_url(&url)?.connect_lazy()?;
    let started = Instant::now();
    let init = tokio::time::timeout(AT_ONCE, lazy.init(BrokerOptions::default())).await;
    expect_failure("connect_lazy + init", init, started, cause, AT_ONCE)?;
    // A call after a failed init still names the cause at once.
    let started = Instant::now();
    let again = tokio::time::timeout(AT_ONCE, lazy.init(BrokerOptions::default())).await;
    expect_failure("init again", again, started, cause, AT_ONCE)?;
    let started = Instant::now();
    let close = tokio::time::timeout(AT_ONCE, lazy.close()).await;
    assert!(close.is_ok(), "close of a handle that never connected took {:?}", started.elapsed());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_given_up_after_the_connect_timeout_which_the_error_names(
) -> Result<(), BoxError> {
    let (port, server) = silent_server().await?;
    let url = url(port);
    let options = || PgOptions::from_url(&url).map(|o| o.connect_timeout(CONNECT_TIMEOUT));
    // The error states the configured bound, in the words the CLI prints.
    let cause = "did not answer a connection attempt within 1 s";
    let bound = CONNECT_TIMEOUT + AT_ONCE;

    let started = Instant::now();
    let connect = tokio::time::timeout(bound, options()?.connect()).await;
    let took = expect_failure("connect", connect, started, cause, bound)?;
    assert!(took >= CONNECT_TIMEOUT, "connect gave up after {took:?}, before its timeout");

    let lazy = options()?.connect_lazy()?;
    let started = Instant::now();
    let init = tokio::time::timeout(bound, lazy.init(BrokerOptions::default())).await;
    let took = expect_failure("connect_lazy + init", init, started, cause, bound)?;
    assert!(took >= CONNECT_TIMEOUT, "init gave up after {took:?}, before its timeout");
    let started = Instant::now();
    let close = tokio::time::timeout(bound, lazy.close()).await;
    assert!(close.is_ok(), "close after a silent server took {:?}", started.elapsed());
    server.abort();
    Ok(())
}

#[test]
fn the_default_connect_timeout_is_ten_seconds() -> Result<(), BoxError> {
    assert_eq!(taskgate_postgres::DEFAULT_CONNECT_TIMEOUT, Duration::from_secs(10));
    let options = PgOptions::from_url("postgres://u@h/db")?;
    assert_eq!(options.get_connect_timeout(), Duration::from_secs(10));
    Ok(())
}
