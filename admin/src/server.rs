//! [`serve`]: the router on a listener, one HTTP/1 connection per task, within [`Limits`]:
//! a header read timeout, a bound on open connections, and a graceful stop; [`bind`]: a
//! listener with a chosen backlog.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

use crate::limits::Limits;

/// How long the accept loop rests after an error that is not one connection's (out of file
/// descriptors, …) before it accepts again.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// A listener on `addr` (`host:port`; every address it resolves to is tried in turn) whose
/// queue of connections waiting for their accept holds `backlog` (Linux caps it at
/// `net.core.somaxconn`). `tokio::net::TcpListener::bind` uses 1,024.
pub async fn bind(addr: &str, backlog: u32) -> io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host(addr).await? {
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        // As std's `TcpListener::bind` does on Unix: a restarted server binds at once.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => match socket.listen(backlog) {
                Ok(listener) => return Ok(listener),
                Err(e) => last = Some(e),
            },
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address")))
}

/// Serves [`router`](crate::router) on `listener` until `shutdown` completes, then stops
/// accepting, lets each open connection finish the request it is in, and returns once every
/// connection closed (each bounded by the [`Limits`] timeouts).
///
/// At most [`Limits::max_connections`] connections are open at once: the next one waits,
/// unaccepted, in the listen backlog until one closes, so clients that hold connections cannot
/// exhaust the process's file descriptors, and a request queued behind them is answered once
/// their timeouts close them. A connection whose request line and headers do not arrive
/// within [`Limits::header_timeout`] (counted from its start, or from its previous answer) is
/// closed; a body that does not arrive within [`Limits::body_timeout`] is answered 408.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<dyn taskgate::Broker>,
    config: crate::AdminConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = config.limits.clone();
    let service = TowerToHyperService::new(crate::router(broker, config));
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let connections = TaskTracker::new();
    let (stop, stopping) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    while let Some((stream, permit)) = tokio::select! {
        () = &mut shutdown => None,
        next = accept(&listener, &permits) => Some(next),
    } {
        let connection = connection(stream, service.clone(), &limits, stopping.clone());
        connections.spawn(async move {
            connection.await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop.send(());
    connections.close();
    connections.wait().await;
    Ok(())
}

/// The next connection, once one of `permits` is free.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> (TcpStream, OwnedSemaphorePermit) {
    // The semaphore is never closed, so acquiring cannot fail; were it to, wait for another.
    let permit = loop {
        if let Ok(permit) = permits.clone().acquire_owned().await {
            break permit;
        }
    };
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                return (stream, permit);
            }
            // One connection's failure (reset before its accept, …): take the next.
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                tracing::warn!(error = %e, "admin API: accept failed; retrying");
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// One HTTP/1 connection until it closes, or until `stopping` fires: then it finishes the
/// request in flight and closes.
fn connection(
    stream: TcpStream,
    service: TowerToHyperService<axum::Router>,
    limits: &Limits,
    mut stopping: watch::Receiver<()>,
) -> impl Future<Output = ()> {
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    async move {
        let mut conn = pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            _ = stopping.changed() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "admin API: connection closed");
        }
    }
}
