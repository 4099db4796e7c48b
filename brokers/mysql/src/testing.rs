//! The brokertest factory for MySQL/MariaDB (extensions §E11): every case gets a fresh
//! [`TestPrefix`] on a shared server, and its tables are dropped in [`Storage::cleanup`]
//! ([`SqlBroker::drop_tables`](taskgate_sql::SqlBroker::drop_tables), the engine's test kit).
//!
//! The server is `TASKGATE_MYSQL_URL` when set. Otherwise, with the `containers` feature and a
//! reachable Docker, one MySQL 8.4 container is started per test process. Neither, or a server
//! that does not answer ⇒ [`brokertest::Unavailable`]: cases skip loudly, or fail with
//! `TASKGATE_REQUIRE_DB=1`. The first storage of a process on a server drops test tables older
//! than an hour (left behind by killed test runs; [`taskgate_sql::testing::sweep_once`]).
//!
//! [`MySqlFactory::galera_from_env`] runs the same cases across the nodes of a MariaDB Galera
//! cluster (`TASKGATE_GALERA_URLS`, comma-separated): handle *i* of a storage connects to node
//! *i* mod *n*, so every case with two or more handles, the model test and the history checker
//! put their handles on different nodes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
#[cfg(feature = "containers")]
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use brokertest::{Factory, ServerClock, Storage, Unavailable};
use taskgate::{BoxError, Broker, Timestamp};
pub use taskgate_sql::testing::TestPrefix;

use crate::{MySqlBroker, MySqlOptions};

/// The environment variable naming the test server.
pub const URL_VAR: &str = "TASKGATE_MYSQL_URL";
/// The environment variable naming the Galera nodes, comma-separated (`ci/galera.sh`).
pub const GALERA_URLS_VAR: &str = "TASKGATE_GALERA_URLS";
/// The factory name of the cross-node run ([`MySqlFactory::galera_from_env`]).
pub const GALERA_NAME: &str = "mysql-galera";
/// Connections per test handle: small, so parallel tests stay far below `max_connections`.
pub const TEST_POOL_SIZE: u32 = 4;
/// Poll interval of test handles (the contract's integration tests use 20 ms).
pub const TEST_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Hands each contract case a fresh table prefix on a MySQL/MariaDB server.
#[derive(Clone, Debug)]
pub struct MySqlFactory {
    url: Option<String>,
    /// Every node handles are spread over (the first is `url`); one for a single server.
    nodes: Vec<String>,
    name: &'static str,
    /// Why there is no server, when `url` is `None` and no container may be started.
    missing: Option<String>,
    pool_size: u32,
}

impl MySqlFactory {
    /// A factory on the server at `url` (`mysql://` or `mariadb://`).
    pub fn from_url(url: impl Into<String>) -> MySqlFactory {
        let url = url.into();
        MySqlFactory {
            nodes: vec![url.clone()],
            url: Some(url),
            name: crate::NAME,
            missing: None,
            pool_size: TEST_POOL_SIZE,
        }
    }

    /// A factory across the nodes of one cluster: handle *i* of every storage connects to
    /// `nodes[i % nodes.len()]`; named [`GALERA_NAME`]. No nodes ⇒ unavailable.
    pub fn from_nodes<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> MySqlFactory {
        let nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
        MySqlFactory {
            url: nodes.first().cloned(),
            nodes,
            name: GALERA_NAME,
            missing: Some(format!("{GALERA_URLS_VAR} names no node")),
            pool_size: TEST_POOL_SIZE,
        }
    }

    /// A factory across the Galera nodes in `TASKGATE_GALERA_URLS` (comma-separated; set by
    /// `ci/galera.sh`), else unavailable (never a container; with `TASKGATE_GALERA=0` an opted-out
    /// skip, [`brokertest::OPTED_OUT`]).
    pub fn galera_from_env() -> MySqlFactory {
        let urls = std::env::var(GALERA_URLS_VAR).unwrap_or_default();
        let nodes = urls.split(',').map(str::trim).filter(|u| !u.is_empty());
        let mut factory = MySqlFactory::from_nodes(nodes.map(str::to_owned));
        factory.missing = Some(match std::env::var("TASKGATE_GALERA").as_deref() {
            // Chosen on purpose (ci/services.sh): a loud skip even under TASKGATE_REQUIRE_DB=1.
            Ok("0") => format!("{} TASKGATE_GALERA=0 (no cluster started)", brokertest::OPTED_OUT),
            _ => format!("{GALERA_URLS_VAR} is not set (run ci/galera.sh)"),
        });
        factory
    }

    /// A factory on `TASKGATE_MYSQL_URL`, else a MySQL 8.4 container (feature `containers`,
    /// Docker reachable), else unavailable.
    pub fn from_env() -> MySqlFactory {
        let url = std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty());
        MySqlFactory {
            nodes: url.iter().cloned().collect(),
            url,
            name: crate::NAME,
            missing: None,
            pool_size: TEST_POOL_SIZE,
        }
    }

    /// Connections per handle (default 4).
    pub fn with_pool_size(mut self, size: u32) -> MySqlFactory {
        self.pool_size = size.max(1);
        self
    }

    /// The server URL, starting the container if needed; `Unavailable` when there is none.
    pub async fn server_url(&self) -> Result<String, BoxError> {
        match (&self.url, &self.missing) {
            (Some(url), _) => Ok(url.clone()),
            (None, Some(why)) => Err(Box::new(Unavailable(why.clone()))),
            (None, None) => container_url().await,
        }
    }

    /// Fresh, swept storage (the same as [`Factory::storage`], with the concrete type).
    pub async fn mysql_storage(&self) -> Result<MySqlStorage, BoxError> {
        let url = self.server_url().await?;
        taskgate_sql::testing::sweep_once(&url, || sweep(&url)).await?;
        let nodes = if self.nodes.is_empty() { vec![url.clone()] } else { self.nodes.clone() };
        Ok(MySqlStorage {
            url,
            nodes: Arc::new(nodes),
            next: Arc::new(AtomicUsize::new(0)),
            prefix: TestPrefix::new(),
            pool_size: self.pool_size,
        })
    }
}

#[async_trait]
impl Factory for MySqlFactory {
    fn name(&self) -> String {
        self.name.to_owned()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        Ok(Box::new(self.mysql_storage().await?))
    }
}

/// One case's tables: a prefix on the test server (or cluster: each new handle on the next
/// node).
#[derive(Clone, Debug)]
pub struct MySqlStorage {
    url: String,
    nodes: Arc<Vec<String>>,
    /// How many handles were handed out: the next goes to node `next % nodes.len()`.
    next: Arc<AtomicUsize>,
    prefix: TestPrefix,
    pool_size: u32,
}

impl MySqlStorage {
    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// This storage's table prefix.
    pub fn prefix(&self) -> &str {
        self.prefix.as_str()
    }

    /// The nodes handles are spread over (one: the server).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The node the next handle connects to (round robin over [`MySqlStorage::nodes`]).
    fn next_url(&self) -> &str {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.nodes.get(i % self.nodes.len().max(1)).map_or(self.url.as_str(), String::as_str)
    }

    /// Options for a handle on this storage on the server at `url`: its prefix, the test pool
    /// size and poll interval.
    fn options_on(&self, url: &str) -> taskgate::Result<MySqlOptions> {
        Ok(MySqlOptions::from_url(url)?
            .prefix(self.prefix.as_str())
            .pool_size(self.pool_size)
            .poll_interval(TEST_POLL_INTERVAL))
    }

    /// Options for the next handle on this storage (on a cluster: the next node): its prefix,
    /// the test pool size and poll interval.
    pub fn options(&self) -> taskgate::Result<MySqlOptions> {
        self.options_on(self.next_url())
    }

    /// A new, not initialised handle with the concrete type (on a cluster: on the next node).
    pub fn mysql_handle(&self) -> taskgate::Result<MySqlBroker> {
        self.options()?.connect_lazy()
    }

    /// Drops every table of this storage.
    pub async fn drop_tables(&self) -> Result<(), BoxError> {
        let broker = self.options_on(&self.url)?.connect_lazy()?;
        let dropped = broker.engine().drop_tables().await;
        let _ = broker.close().await;
        Ok(dropped?)
    }
}

#[async_trait]
impl Storage for MySqlStorage {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        Ok(Arc::new(self.mysql_handle()?))
    }

    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        let built = MySqlOptions::from_url(self.next_url()).and_then(|o| {
            o.prefix(prefix)
                .pool_size(self.pool_size)
                .poll_interval(TEST_POLL_INTERVAL)
                .connect_lazy()
        });
        Some(built.map(|b| Arc::new(b) as Arc<dyn Broker>))
    }

    async fn handle_polling_every(
        &self,
        interval: Duration,
    ) -> Option<Result<Arc<dyn Broker>, BoxError>> {
        let built = self.options().and_then(|o| o.poll_interval(interval).connect_lazy());
        Some(built.map(|b| Arc::new(b) as Arc<dyn Broker>).map_err(Into::into))
    }

    /// Every session of a handle on this clock runs `SET timestamp = <the clock>` when the
    /// pool hands it out: `NOW()` and `UNIX_TIMESTAMP()`, the engine's server time, follow.
    async fn server_clock(
        &self,
        start: Timestamp,
    ) -> Option<Result<Box<dyn ServerClock>, BoxError>> {
        let ms = Arc::new(std::sync::atomic::AtomicI64::new(start.as_millis()));
        Some(Ok(Box::new(SessionClock { storage: self.clone(), ms })))
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        self.drop_tables().await
    }
}

/// The server clock of one storage: the time its handles' sessions are set to.
struct SessionClock {
    storage: MySqlStorage,
    ms: Arc<std::sync::atomic::AtomicI64>,
}

#[async_trait]
impl ServerClock for SessionClock {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        let options = self.storage.options()?.session_clock(self.ms.clone());
        Ok(Arc::new(options.connect_lazy()?))
    }

    async fn set(&self, at: Timestamp) -> Result<(), BoxError> {
        self.ms.store(at.as_millis(), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// Drops every test table set on the server at `url` made more than an hour ago; returns
/// their prefixes. An unreachable server is [`brokertest::Unavailable`].
pub async fn sweep(url: &str) -> Result<Vec<TestPrefix>, BoxError> {
    let broker = MySqlOptions::from_url(url)?.connect_lazy()?;
    let swept = broker.engine().sweep_stale_test_tables().await;
    let _ = broker.close().await;
    swept
}

#[cfg(feature = "containers")]
async fn container_url() -> Result<String, BoxError> {
    static STARTED: OnceLock<Result<String, String>> = OnceLock::new();
    if let Some(done) = STARTED.get() {
        return done.clone().map_err(|why| Box::new(Unavailable(why)) as BoxError);
    }
    let started = tokio::task::spawn_blocking(|| STARTED.get_or_init(container::start).clone())
        .await
        .map_err(|e| Box::new(Unavailable(format!("container start panicked: {e}"))) as BoxError)?;
    started.map_err(|why| Box::new(Unavailable(why)) as BoxError)
}

#[cfg(not(feature = "containers"))]
async fn container_url() -> Result<String, BoxError> {
    Err(Box::new(Unavailable(format!(
        "{URL_VAR} is not set (and taskgate-mysql was built without the containers feature)"
    ))))
}

#[cfg(feature = "containers")]
mod container {
    //! One MySQL 8.4 container per test process, kept for the life of the process.

    use std::sync::OnceLock;

    use testcontainers::runners::SyncRunner;
    use testcontainers::{Container, ImageExt};
    use testcontainers_modules::mysql::Mysql;

    static CONTAINER: OnceLock<Container<Mysql>> = OnceLock::new();

    fn docker_reachable() -> bool {
        std::env::var_os("DOCKER_HOST").is_some()
            || std::path::Path::new("/var/run/docker.sock").exists()
    }

    /// Starts the container; the URL, or why there is none.
    pub(super) fn start() -> Result<String, String> {
        if !docker_reachable() {
            return Err(format!("{} is not set and Docker is not reachable", super::URL_VAR));
        }
        let container = Mysql::default().with_tag("8.4").start().map_err(|e| {
            format!("{} is not set and the MySQL 8.4 container did not start: {e}", super::URL_VAR)
        })?;
        let host = container.get_host().map_err(|e| e.to_string())?;
        let port = container.get_host_port_ipv4(3306).map_err(|e| e.to_string())?;
        let url = format!("mysql://root@{host}:{port}/test");
        let _ = CONTAINER.set(container);
        Ok(url)
    }
}
