//! Running the built `taskgate` binary with a deadline, the databases the tests run it
//! against, and the filters that take IDs and times out of snapshots.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use brokertest::Storage as _;
use taskgate::{Broker, BrokerOptions};

/// Longest one run of the binary may take (a hang fails the test, naming the command).
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(120);

/// What one run of the binary printed and how it exited.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// The binary with no database settings from the caller's environment.
pub(crate) fn taskgate() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_taskgate"));
    cmd.env_remove("TASKGATE_URL").env_remove("TASKGATE_PREFIX");
    cmd
}

/// Runs `cmd` to its end (at most [`RUN_LIMIT`]) and collects its output.
pub(crate) fn run(cmd: &mut Command) -> Run {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > RUN_LIMIT => {
                let _ = child.kill();
                panic!("{what} still running after {RUN_LIMIT:?}");
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// A thread reading a pipe to its end.
pub(crate) fn reader(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    })
}

/// Sends SIGINT to `child` (when `interrupt`) and waits at most `limit` for it to exit; its exit
/// code (`None` when a signal ended it). A child still running then is killed and the test
/// fails naming `what`.
pub(crate) fn stop_child(
    child: &mut std::process::Child,
    interrupt: bool,
    limit: Duration,
    what: &str,
) -> Option<i32> {
    if interrupt {
        let kill = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("kill -INT");
        assert!(kill.success(), "kill -INT {what}");
    }
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("{what} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The binary run with `args` against `db`.
pub(crate) fn tg(db: &TestDb, args: &[&str]) -> Run {
    run(taskgate().args(args).env("TASKGATE_URL", &db.url).env("TASKGATE_PREFIX", &db.prefix))
}

/// True when the run's stdout parses as JSON; returns it.
pub(crate) fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", run.stdout, run.stderr))
}

/// A database the binary and the test share: a SQLite file, or a fresh table prefix on the
/// PostgreSQL or MariaDB server of `TASKGATE_PG_URL` / `TASKGATE_MYSQL_URL`.
pub(crate) struct TestDb {
    pub(crate) backend: &'static str,
    pub(crate) url: String,
    pub(crate) prefix: String,
    keep: Keep,
}

enum Keep {
    Sqlite(#[allow(dead_code, reason = "removed when dropped")] tempfile::TempDir),
    Postgres(taskgate_postgres::testing::PgStorage),
    MySql(taskgate_mysql::testing::MySqlStorage),
}

impl TestDb {
    /// Fresh storage on `backend`; `None` (after a loud line) when its server is not
    /// configured, a failure instead under `TASKGATE_REQUIRE_DB=1`.
    pub(crate) async fn new(backend: &'static str) -> Option<TestDb> {
        match backend {
            "sqlite" => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let path: PathBuf = dir.path().join("tasks.db");
                Some(TestDb {
                    backend,
                    url: format!("sqlite://{}", path.display()),
                    prefix: "taskgate_".into(),
                    keep: Keep::Sqlite(dir),
                })
            }
            "postgres" => {
                let url = server_url(taskgate_postgres::testing::URL_VAR)?;
                let factory = taskgate_postgres::testing::PgFactory::from_url(&url).expect("url");
                let storage = factory.pg_storage().await.expect("postgres storage");
                let prefix = storage.prefix().to_owned();
                Some(TestDb { backend, url, prefix, keep: Keep::Postgres(storage) })
            }
            "mysql" => {
                let url = server_url(taskgate_mysql::testing::URL_VAR)?;
                let factory = taskgate_mysql::testing::MySqlFactory::from_url(&url);
                let storage = factory.mysql_storage().await.expect("mysql storage");
                let prefix = storage.prefix().to_owned();
                Some(TestDb { backend, url, prefix, keep: Keep::MySql(storage) })
            }
            other => panic!("no backend {other}"),
        }
    }

    /// An initialised library handle on the same tables.
    pub(crate) async fn broker(&self) -> Arc<dyn Broker> {
        self.broker_with(BrokerOptions::default()).await
    }

    /// A handle on the database initialised with `options` (a short lease TTL, say).
    pub(crate) async fn broker_with(&self, options: BrokerOptions) -> Arc<dyn Broker> {
        let broker: Arc<dyn Broker> = match self.backend {
            "sqlite" => Arc::new(
                taskgate_sqlite::SqliteBroker::connect(&self.url).await.expect("sqlite handle"),
            ),
            "postgres" => Arc::new(
                taskgate_postgres::PgOptions::from_url(&self.url)
                    .expect("url")
                    .prefix(&self.prefix)
                    .connect()
                    .await
                    .expect("postgres handle"),
            ),
            _ => Arc::new(
                taskgate_mysql::MySqlOptions::from_url(&self.url)
                    .expect("url")
                    .prefix(&self.prefix)
                    .connect()
                    .await
                    .expect("mysql handle"),
            ),
        };
        broker.init(options).await.expect("init");
        broker
    }

    /// Drops the tables (the SQLite directory goes when dropped).
    pub(crate) async fn remove(self) {
        match &self.keep {
            Keep::Sqlite(_) => {}
            Keep::Postgres(storage) => storage.cleanup().await.expect("drop postgres tables"),
            Keep::MySql(storage) => storage.drop_tables().await.expect("drop mysql tables"),
        }
    }
}

/// The server URL in `var`; `None` with a loud line when unset (a panic under
/// `TASKGATE_REQUIRE_DB=1`).
pub(crate) fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        _ => {
            brokertest::skip("this test", &format!("{var} is not set"));
            None
        }
    }
}

/// `text` with IDs, times, milliseconds and the table prefix replaced by placeholders.
pub(crate) fn scrub(text: &str, prefix: &str, names: &[(&str, &str)]) -> String {
    let mut text = text.replace(prefix, "[prefix]");
    for (id, name) in names {
        text = text.replace(id, &format!("[{name}]"));
    }
    text
}

/// insta filters for what varies between runs: ULIDs, RFC 3339 times, elapsed times.
pub(crate) fn filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (r"\b[0-9A-HJKMNP-TV-Z]{26}\b", "[id]"),
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", "[time]"),
        (r#""elapsed_ms": \d+"#, r#""elapsed_ms": "[ms]""#),
        (r" +\d+(\.\d)? (ms|s)\b", " [elapsed]"),
    ]
}
