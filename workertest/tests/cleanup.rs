//! A failing scenario leaves no storage behind (issue 41): a scenario that fails part-way —
//! by a panic, or by returning an error — with a runtime still running and its tables full,
//! run through the same path as every generated test ([`workertest::run_scenario`]), is
//! reported failed with its message, and afterwards no table of its prefix is left: on SQLite
//! (a shared file, one prefix per scenario), PostgreSQL and MariaDB. Unreachable servers skip
//! loudly (and fail under `TASKGATE_REQUIRE_DB=1`, as in CI).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use brokertest::{CaseResult, Factory, Outcome, Storage};
use taskgate::{BoxError, BoxFuture};
use taskgate_sql::testing::TEST_PREFIX_START;
use taskgate_worker::JobError;
use workertest::jobs::Work;
use workertest::{run_scenario, Scenario, World};

/// Starts a runtime, runs a task to completion (the tables exist and hold it), then panics.
fn panics_midway(factory: Arc<dyn Factory>) -> BoxFuture<'static, CaseResult> {
    Box::pin(async move {
        let (_world, _runtime) = busy_world(&*factory).await?;
        panic!("a deliberate assertion failure, before World::finish");
    })
}

/// The same, returning an error instead.
fn errs_midway(factory: Arc<dyn Factory>) -> BoxFuture<'static, CaseResult> {
    Box::pin(async move {
        let (_world, _runtime) = busy_world(&*factory).await?;
        Err("a deliberate error, before World::finish".into())
    })
}

async fn busy_world(
    factory: &dyn Factory,
) -> Result<(World, taskgate_worker::Runtime), BoxError> {
    let world = World::new(factory).await?;
    let runtime = world
        .start(|b| b.register(|job: Work, _ctx| async move { Ok::<_, JobError>(job.n) }))
        .await?;
    let client = runtime.client();
    let id = client.submit(Work { n: 7 }).await?;
    assert_eq!(client.wait(&id).await?, 7);
    Ok((world, runtime))
}

const FAILING: [(Scenario, &str); 2] = [
    (Scenario { name: "panics_midway", run: panics_midway }, "a deliberate assertion failure"),
    (Scenario { name: "errs_midway", run: errs_midway }, "a deliberate error"),
];

type Made = Pin<Box<dyn Future<Output = Result<(String, Box<dyn Storage>), BoxError>> + Send>>;

/// A factory that remembers the table prefix of every storage it hands out.
struct Recording {
    name: &'static str,
    make: Box<dyn Fn() -> Made + Send + Sync>,
    prefixes: Mutex<Vec<String>>,
}

#[async_trait]
impl Factory for Recording {
    fn name(&self) -> String {
        self.name.to_owned()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        let (prefix, storage) = (self.make)().await?;
        self.prefixes.lock().unwrap_or_else(|p| p.into_inner()).push(prefix);
        Ok(storage)
    }
}

/// Runs both failing scenarios on `factory`; returns the prefixes they used (`None`: the
/// backend is unavailable, skipped loudly).
async fn run_failing(factory: Arc<Recording>) -> Result<Option<Vec<String>>, BoxError> {
    for (scenario, says) in &FAILING {
        let outcome = run_scenario(scenario, factory.clone()).await;
        match &outcome {
            Outcome::Skipped(why) => {
                brokertest::skip(&format!("{}: failing-scenario cleanup", factory.name), why);
                return Ok(None);
            }
            Outcome::Failed(why) if why.contains(says) => {}
            other => return Err(format!("{}: expected a failure, got {other:?}", scenario.name).into()),
        }
    }
    let prefixes = factory.prefixes.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(prefixes.len(), FAILING.len(), "one storage per scenario");
    Ok(Some(prefixes))
}

/// Asserts that none of `tables` (every test table on the server) has one of `prefixes`.
fn assert_gone(prefixes: &[String], tables: &[String]) {
    let left: Vec<&String> =
        tables.iter().filter(|t| prefixes.iter().any(|p| t.starts_with(p.as_str()))).collect();
    assert!(left.is_empty(), "tables left behind by the failing scenarios: {left:?}");
}

/// A factory on `$factory` that records each storage's prefix through `$storage` (the
/// backend's concrete storage constructor).
macro_rules! recording {
    ($name:expr, $factory:expr, $storage:ident) => {{
        let factory = $factory;
        let make: Box<dyn Fn() -> Made + Send + Sync> = Box::new(move || {
            let factory = factory.clone();
            Box::pin(async move {
                let storage = factory.$storage().await?;
                Ok((storage.prefix().to_owned(), Box::new(storage) as Box<dyn Storage>))
            })
        });
        Arc::new(Recording { name: $name, make, prefixes: Mutex::default() })
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_scenario_leaves_no_sqlite_tables() -> Result<(), BoxError> {
    use taskgate_sqlite::sqlx::{self, Connection as _};
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("shared.db");
    let sqlite = taskgate_sqlite::testing::SqliteFactory::on_file(&file);
    // The file is this test's own: every test table in it belongs to one of its scenarios.
    let make: Box<dyn Fn() -> Made + Send + Sync> = Box::new(move || {
        let sqlite = sqlite.clone();
        Box::pin(async move { Ok((TEST_PREFIX_START.to_owned(), sqlite.storage().await?)) })
    });
    let factory = Arc::new(Recording { name: "sqlite", make, prefixes: Mutex::default() });
    let Some(prefixes) = run_failing(factory).await? else { return Ok(()) };
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display())).await?;
    let list = "SELECT name FROM sqlite_master WHERE type = 'table'";
    let tables: Vec<String> = sqlx::query_scalar(list).fetch_all(&mut conn).await?;
    conn.close().await?;
    assert_gone(&prefixes, &tables);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_scenario_leaves_no_postgres_tables() -> Result<(), BoxError> {
    use taskgate_postgres::sqlx::{self, Connection as _};
    let pg = taskgate_postgres::testing::PgFactory::from_env();
    let factory = recording!("postgres", pg.clone(), pg_storage);
    let Some(prefixes) = run_failing(factory).await? else { return Ok(()) };
    let mut conn = sqlx::PgConnection::connect(&pg.url().await?).await?;
    let list = "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()";
    let tables: Vec<String> = sqlx::query_scalar(list).fetch_all(&mut conn).await?;
    conn.close().await?;
    assert_gone(&prefixes, &tables);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_scenario_leaves_no_mariadb_tables() -> Result<(), BoxError> {
    use taskgate_mysql::sqlx::{self, Connection as _};
    let mysql = taskgate_mysql::testing::MySqlFactory::from_env();
    let factory = recording!("mysql", mysql.clone(), mysql_storage);
    let Some(prefixes) = run_failing(factory).await? else { return Ok(()) };
    let mut conn = sqlx::MySqlConnection::connect(&mysql.server_url().await?).await?;
    let list = "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
                WHERE table_schema = DATABASE()";
    let tables: Vec<String> = sqlx::query_scalar(list).fetch_all(&mut conn).await?;
    conn.close().await?;
    assert_gone(&prefixes, &tables);
    Ok(())
}
