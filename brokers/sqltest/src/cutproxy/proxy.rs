//! [`CutProxy`]: a TCP proxy for tests that sits between a broker and its database server and
//! cuts the connection at a transaction's `COMMIT` — right before forwarding it (the server
//! never sees it: the transaction rolls back) or right after the server answered it (the
//! transaction committed, the client never hears so). It can also stop accepting, so the
//! server looks unreachable (connection refused), and accept again on the same port.
//!
//! It recognises the `COMMIT` that sqlx sends as a plain-text query: PostgreSQL's simple
//! `Query` message ([`PG_COMMIT`]) and MySQL's `COM_QUERY` packet ([`MYSQL_COMMIT`]). On
//! PostgreSQL it also recognises where the engine's one-statement ack and enqueue commit (an
//! autocommit statement sends no `COMMIT`): it follows the client's messages, remembers the
//! prepared statements whose `Parse` carries one of their marker comments, and treats the
//! `Bind` of one as that statement's commit (the server runs it and commits at the `Sync`
//! after it, before it answers). The connection must not be encrypted (`sslmode=disable`,
//! `ssl-mode=disabled`), and a `COMMIT` split across two reads is not seen (sqlx writes it in one
//! piece; a test
//! asserts [`CutProxy::cuts`] so a missed one fails it).
//!
//! The checks every server backend runs through it are in `checks.rs`, written once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use taskgate_sql::test_hooks::{ONE_STATEMENT_ACK, ONE_STATEMENT_CLAIM, ONE_STATEMENT_ENQUEUE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// PostgreSQL's `COMMIT` as a simple query: `'Q'`, length 11, `"COMMIT\0"`.
pub const PG_COMMIT: &[u8] = b"Q\x00\x00\x00\x0bCOMMIT\x00";
/// MySQL's `COMMIT` as `COM_QUERY`: payload length 7, sequence 0, command 3, `"COMMIT"`.
pub const MYSQL_COMMIT: &[u8] = b"\x07\x00\x00\x00\x03COMMIT";

/// Where the next `COMMIT` is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Not forwarded: the server sees the connection close inside the transaction and rolls
    /// it back.
    BeforeCommit,
    /// Forwarded, and the server's answer awaited and dropped: the transaction committed, the
    /// client sees its connection close without an answer.
    AfterCommit,
    /// As `AfterCommit`, and before the client sees the close the proxy stops accepting and
    /// closes every other connection: the server stays unreachable (connection refused) until
    /// [`CutProxy::resume`].
    AfterCommitThenRefuse,
}

/// What the proxy's connections share.
struct Shared {
    upstream: SocketAddr,
    commit: &'static [u8],
    /// Follow PostgreSQL's frontend messages for the one-statement writes ([`PgFrontend`]).
    pg: bool,
    armed: Mutex<Option<Cut>>,
    cuts: AtomicUsize,
    /// Of the cuts, those at a one-statement ack (not at a `COMMIT`).
    ack_cuts: AtomicUsize,
    /// Of the cuts, those at a one-statement enqueue.
    enqueue_cuts: AtomicUsize,
    /// Of the cuts, those at a one-statement claim.
    claim_cuts: AtomicUsize,
    /// Connections accepted so far.
    accepted: AtomicUsize,
    /// `true` closes every connection at once.
    kill: watch::Sender<bool>,
    /// `true` stops the accept loop; it drops the listener and then sets `closed`.
    stop: watch::Sender<bool>,
    closed: watch::Sender<bool>,
}

impl Shared {
    /// Stops accepting and waits until the port is closed.
    async fn refuse(&self) {
        let mut closed = self.closed.subscribe();
        self.stop.send_replace(true);
        let _ = closed.wait_for(|c| *c).await;
    }

    /// Closes every open connection.
    fn drop_connections(&self) {
        self.kill.send_replace(true);
        self.kill.send_replace(false);
    }
}

/// A TCP proxy that cuts a connection at `COMMIT` on demand (module docs).
pub struct CutProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for CutProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CutProxy").field("addr", &self.addr).finish()
    }
}

/// A port on 127.0.0.1 nothing listens on (bound once by this process, then closed).
pub fn closed_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

impl CutProxy {
    /// Starts a proxy on a free port of 127.0.0.1 forwarding to `upstream`, recognising
    /// `commit` ([`PG_COMMIT`] or [`MYSQL_COMMIT`]; with [`PG_COMMIT`], the one-statement
    /// ack's and enqueue's commits too).
    pub async fn start(upstream: SocketAddr, commit: &'static [u8]) -> std::io::Result<CutProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            commit,
            pg: commit == PG_COMMIT,
            armed: Mutex::new(None),
            cuts: AtomicUsize::new(0),
            ack_cuts: AtomicUsize::new(0),
            enqueue_cuts: AtomicUsize::new(0),
            claim_cuts: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            kill: watch::channel(false).0,
            stop: watch::channel(false).0,
            closed: watch::channel(false).0,
        });
        tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(CutProxy { addr, shared })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts the next `COMMIT` any connection sends, once.
    pub fn arm(&self, cut: Cut) {
        *self.shared.armed.lock().unwrap_or_else(|p| p.into_inner()) = Some(cut);
    }

    /// How many `COMMIT`s were cut so far (a one-statement write's commit counting as one).
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// How many of [`CutProxy::cuts`] were at PostgreSQL's one-statement ack rather than at a
    /// `COMMIT`: a test asserts it to know that path was cut.
    pub fn ack_cuts(&self) -> usize {
        self.shared.ack_cuts.load(Ordering::SeqCst)
    }

    /// How many of [`CutProxy::cuts`] were at PostgreSQL's one-statement enqueue.
    pub fn enqueue_cuts(&self) -> usize {
        self.shared.enqueue_cuts.load(Ordering::SeqCst)
    }

    /// How many of [`CutProxy::cuts`] were at PostgreSQL's one-statement claim.
    pub fn claim_cuts(&self) -> usize {
        self.shared.claim_cuts.load(Ordering::SeqCst)
    }

    /// How many connections the proxy has accepted (each one a connection the client opened).
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Closes every open connection (the server sees each one close; open transactions roll
    /// back). New connections are still accepted.
    pub fn drop_connections(&self) {
        self.shared.drop_connections();
    }

    /// Stops accepting (the port closes: new connections are refused) and closes every open
    /// connection.
    pub async fn refuse(&self) {
        self.shared.refuse().await;
        self.drop_connections();
    }

    /// Accepts again on the same address after [`CutProxy::refuse`] (or a refusing cut).
    pub async fn resume(&self) -> std::io::Result<()> {
        let listener = TcpListener::bind(self.addr).await?;
        self.shared.stop.send_replace(false);
        self.shared.closed.send_replace(false);
        tokio::spawn(accept_loop(listener, self.shared.clone()));
        Ok(())
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.shared.stop.send_replace(true);
        self.drop_connections();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { break };
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                let shared = shared.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(shared.upstream).await {
                        relay(client, server, shared).await;
                    }
                });
            }
        }
    }
    drop(listener);
    shared.closed.send_replace(true);
}

/// Moves bytes both ways until either side closes, a kill, or an armed cut.
async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut kill = shared.kill.subscribe();
    // Set by the client side when the server's next answer must be swallowed (the cut after
    // COMMIT, and whether to refuse then); the server side counts the cut when it came.
    let (swallow_tx, swallow_rx) = watch::channel(None::<Cut>);
    let mut server_kill = kill.clone();
    let counted = shared.clone();
    let to_client = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = tokio::select! {
                _ = server_kill.changed() => return,
                read = server_read.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
            };
            let swallow = *swallow_rx.borrow();
            if let Some(cut) = swallow {
                if cut == Cut::AfterCommitThenRefuse {
                    counted.refuse().await;
                    counted.drop_connections();
                }
                counted.cuts.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let mut pg = shared.pg.then(PgFrontend::default);
    let to_server = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = tokio::select! {
                _ = kill.changed() => return,
                read = client_read.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
            };
            let chunk = &buf[..n];
            let marked = pg.as_mut().and_then(|pg| pg.feed(chunk));
            let statement_at = marked.map(|(at, _)| at);
            let at = match (find(chunk, shared.commit), statement_at) {
                (Some(commit), Some(statement)) => Some(commit.min(statement)),
                (commit, statement) => commit.or(statement),
            };
            let cut = match at {
                Some(_) => shared.armed.lock().unwrap_or_else(|p| p.into_inner()).take(),
                None => None,
            };
            if let (Some(_), Some((statement, write))) = (cut, marked) {
                if at == Some(statement) {
                    let counter = match write {
                        OneStatement::Ack => &shared.ack_cuts,
                        OneStatement::Enqueue => &shared.enqueue_cuts,
                        OneStatement::Claim => &shared.claim_cuts,
                    };
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            }
            match (cut, at) {
                (Some(Cut::BeforeCommit), Some(at)) => {
                    let _ = server_write.write_all(&chunk[..at]).await;
                    shared.cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                (Some(cut), Some(_)) => {
                    swallow_tx.send_replace(Some(cut));
                    if server_write.write_all(chunk).await.is_err() {
                        return;
                    }
                    // The server side swallows the answer, counts the cut and ends the
                    // connection; this side waits for that.
                    std::future::pending::<()>().await;
                }
                _ => {
                    if server_write.write_all(chunk).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    // Either direction ending ends the connection: both sockets close when the halves drop.
    tokio::select! {
        () = to_client => {}
        () = to_server => {}
    }
}

/// A one-statement (autocommit) write of the engine, known by the marker comment its SQL
/// opens with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OneStatement {
    /// [`ONE_STATEMENT_ACK`].
    Ack,
    /// [`ONE_STATEMENT_ENQUEUE`].
    Enqueue,
    /// [`ONE_STATEMENT_CLAIM`].
    Claim,
}

impl OneStatement {
    /// The write whose marker `query` carries, if any.
    fn of(query: &[u8]) -> Option<OneStatement> {
        let markers = [
            (ONE_STATEMENT_ACK, OneStatement::Ack),
            (ONE_STATEMENT_ENQUEUE, OneStatement::Enqueue),
            (ONE_STATEMENT_CLAIM, OneStatement::Claim),
        ];
        markers.into_iter().find(|(m, _)| find(query, m.as_bytes()).is_some()).map(|(_, w)| w)
    }
}

/// PostgreSQL's frontend messages on one connection, followed to find where a one-statement
/// write commits: the `Bind` of a prepared statement whose `Parse` carried its marker
/// ([`OneStatement`]).
#[derive(Default)]
struct PgFrontend {
    /// The startup packet (the one message without a type byte) has gone by.
    started: bool,
    /// The start of a message whose end has not arrived yet.
    partial: Vec<u8>,
    /// Names of the prepared statements that are one-statement writes, and which.
    marked: HashMap<Vec<u8>, OneStatement>,
}

impl PgFrontend {
    /// Reads `chunk` (the next bytes the client sent); returns where in it the first `Bind` of
    /// a one-statement write starts (0 when it began in an earlier chunk), and which write.
    fn feed(&mut self, chunk: &[u8]) -> Option<(usize, OneStatement)> {
        let carried = self.partial.len();
        let mut buf = std::mem::take(&mut self.partial);
        buf.extend_from_slice(chunk);
        let (mut at, mut found) = (0, None);
        loop {
            let rest = &buf[at..];
            let (head, tag) = if self.started { (5, rest.first().copied()) } else { (4, None) };
            let Some(len) = rest.get(head - 4..head).map(|b| be_u32(b) as usize) else { break };
            let end = head - 4 + len;
            if len < 4 || rest.len() < end {
                break;
            }
            let body = &rest[head..end];
            match tag {
                None => self.started = true,
                Some(b'P') => {
                    let (name, tail) = cstr(body);
                    let (query, _) = cstr(tail);
                    match OneStatement::of(query) {
                        Some(write) => self.marked.insert(name.to_vec(), write),
                        None => self.marked.remove(name),
                    };
                }
                Some(b'B') => {
                    let (_portal, tail) = cstr(body);
                    let (name, _) = cstr(tail);
                    if let (None, Some(write)) = (found, self.marked.get(name)) {
                        found = Some((at.saturating_sub(carried), *write));
                    }
                }
                Some(_) => {}
            }
            at += end;
        }
        self.partial = buf[at..].to_vec();
        found
    }
}

/// A big-endian `u32` from four bytes.
fn be_u32(b: &[u8]) -> u32 {
    b.iter().fold(0, |n, byte| n << 8 | u32::from(*byte))
}

/// Splits a NUL-terminated string off the front of `b`: (the string, what follows the NUL).
fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|c| *c == 0) {
        Some(nul) => (&b[..nul], &b[nul + 1..]),
        None => (b, &[]),
    }
}

/// A proxy in front of the server `url` names (`postgres://…` or `mysql://…` with
/// `user@host:port`), and `url` rewritten to go through it, unencrypted (`sslmode=disable`,
/// `ssl-mode=disabled`) so the proxy can see the `COMMIT`.
pub async fn start_for_url(url: &str) -> std::io::Result<(CutProxy, String)> {
    let bad =
        |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{url}: {why}"));
    let (scheme, _) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
    let (commit, tls_off) = match scheme {
        "postgres" | "postgresql" => (PG_COMMIT, "sslmode=disable"),
        "mysql" | "mariadb" => (MYSQL_COMMIT, "ssl-mode=disabled"),
        _ => return Err(bad("not a PostgreSQL or MySQL URL")),
    };
    let (user, rest) = url.rsplit_once('@').ok_or_else(|| bad("no user@host"))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (host_port, tail) = rest.split_at(end);
    let upstream =
        tokio::net::lookup_host(host_port).await?.next().ok_or_else(|| bad("no address"))?;
    let proxy = CutProxy::start(upstream, commit).await?;
    let joiner = if tail.contains('?') { '&' } else { '?' };
    let proxied = format!("{user}@{}{tail}{joiner}{tls_off}", proxy.addr());
    Ok((proxy, proxied))
}

/// Where `needle` starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_patterns_are_found_where_they_start() {
        assert_eq!(find(b"xxQ\x00\x00\x00\x0bCOMMIT\x00", PG_COMMIT), Some(2));
        assert_eq!(find(MYSQL_COMMIT, MYSQL_COMMIT), Some(0));
        assert_eq!(find(b"COMMIT", PG_COMMIT), None);
    }

    /// One frontend message: its type byte, its length, its body.
    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(u32::try_from(body.len() + 4).unwrap_or(0)).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn parse(name: &str, query: &str) -> Vec<u8> {
        message(b'P', format!("{name}\0{query}\0\0\0").as_bytes())
    }

    fn bind(name: &str) -> Vec<u8> {
        message(b'B', format!("\0{name}\0\0\0\0\0\0\0").as_bytes())
    }

    #[test]
    fn the_bind_of_a_marked_statement_is_found_across_reads() {
        let (ack, enqueue) = (ONE_STATEMENT_ACK, ONE_STATEMENT_ENQUEUE);
        let mut pg = PgFrontend::default();
        let startup = [&[0, 0, 0, 8][..], &[0, 3, 0, 0]].concat();
        let prepare = [
            parse("s1", &format!("{ack} UPDATE t")),
            parse("s2", "SELECT 1"),
            parse("s3", &format!("{enqueue} WITH n AS (SELECT 1) INSERT INTO t")),
        ]
        .concat();
        assert_eq!(pg.feed(&[startup, prepare].concat()), None, "a Parse is no commit");
        assert_eq!(pg.feed(&bind("s2")), None, "another statement");
        let run = [bind("s1"), message(b'E', b"\0\0\0\0\0"), message(b'S', b"")].concat();
        let sync = message(b'S', b"");
        let found = pg.feed(&[sync.clone(), run.clone()].concat());
        assert_eq!(found, Some((sync.len(), OneStatement::Ack)));
        // Split inside the Bind: found in the read that completes it, at its start (0).
        let (head, tail) = run.split_at(3);
        assert_eq!(pg.feed(head), None);
        assert_eq!(pg.feed(tail), Some((0, OneStatement::Ack)));
        assert_eq!(pg.feed(&bind("s3")), Some((0, OneStatement::Enqueue)), "the enqueue");
        // A name prepared again for another statement is no longer the ack.
        assert_eq!(pg.feed(&parse("s1", "SELECT 2")), None);
        assert_eq!(pg.feed(&bind("s1")), None);
    }
}
