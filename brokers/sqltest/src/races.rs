//! The shape every server backend's race rig (`brokertest::races`) shares: a pair of handles on
//! one storage — A, whose transactions the engine's before-commit hook can hold, and B, its own
//! pool — and the deadlock race's other writer, a plain transaction on a connection of its own.
//! A backend supplies what is its own ([`SqlRaceStorage`]): how to see B wait for a lock, how to
//! drop the storage, and the other writer's connection and locking statement in its dialect.

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use brokertest::races::{CommitHook, ForeignWriter, RacePair};
use brokertest::{within, WAIT_LIMIT};
use sqlx::{Connection, Database, Encode, Executor, IntoArguments, Type};
use taskgate::{BoxError, Broker, BrokerOptions};
use taskgate_sql::SqlBroker;

/// What a server backend's race rig supplies to [`SqlRacePair`].
#[async_trait]
pub trait SqlRaceStorage: Send + Sync + 'static {
    /// The backend's broker (`PgBroker`, `MySqlBroker`).
    type Broker: Broker + Clone + 'static;
    /// The database of the other writer's connection.
    type Db: Database;

    /// True when handle `b` waits for a row lock now.
    async fn b_waits(&self, b: &Self::Broker) -> Result<bool, BoxError>;

    /// Drops the storage's tables.
    async fn cleanup(&self) -> Result<(), BoxError>;

    /// A plain connection on the storage's server for the deadlock race's other writer, set
    /// up as the race needs (its transaction is begun by the pair).
    async fn writer_connection(&self) -> Result<<Self::Db as Database>::Connection, BoxError>;

    /// The other writer's statement that locks one task row by changing it; binds the ID.
    fn writer_lock_sql(&self) -> String;
}

/// Handles A and B on one storage, as a `brokertest::races::RacePair`.
pub struct SqlRacePair<S: SqlRaceStorage> {
    storage: S,
    a: S::Broker,
    /// A's engine: its before-commit hook holds A's transactions.
    a_engine: SqlBroker,
    b: S::Broker,
}

impl<S: SqlRaceStorage> SqlRacePair<S>
where
    PlainWriter<S::Db>: ForeignWriter,
{
    /// The pair of `a` (whose engine is `a_engine`) and `b` on `storage`, each initialised
    /// with `options`.
    pub async fn init(
        storage: S,
        (a, a_engine): (S::Broker, SqlBroker),
        b: S::Broker,
        options: BrokerOptions,
    ) -> Result<Box<dyn RacePair>, BoxError> {
        within(WAIT_LIMIT, "init of A", a.init(options.clone())).await?;
        within(WAIT_LIMIT, "init of B", b.init(options)).await?;
        Ok(Box::new(SqlRacePair { storage, a, a_engine, b }))
    }
}

#[async_trait]
impl<S: SqlRaceStorage> RacePair for SqlRacePair<S>
where
    PlainWriter<S::Db>: ForeignWriter,
{
    fn a(&self) -> Arc<dyn Broker> {
        Arc::new(self.a.clone())
    }

    fn b(&self) -> Arc<dyn Broker> {
        Arc::new(self.b.clone())
    }

    fn set_a_hook(&self, hook: Option<CommitHook>) {
        self.a_engine.set_before_commit_hook(hook);
    }

    async fn b_waits(&self) -> Option<bool> {
        match within(WAIT_LIMIT, "B's lock waits", self.storage.b_waits(&self.b)).await {
            Ok(waiting) => Some(waiting),
            Err(e) => panic!("cannot read B's lock waits: {e}"),
        }
    }

    async fn finish(self: Box<Self>) -> Result<(), BoxError> {
        within(WAIT_LIMIT, "close of A", self.a.close()).await?;
        within(WAIT_LIMIT, "close of B", self.b.close()).await?;
        within(WAIT_LIMIT, "the storage's cleanup", self.storage.cleanup()).await
    }

    async fn foreign_writer(&self) -> Option<Result<Box<dyn ForeignWriter>, BoxError>> {
        let open = async {
            let conn = self.storage.writer_connection().await?;
            let lock = self.storage.writer_lock_sql();
            let writer = PlainWriter::<S::Db> { conn, lock, begun: false, db: PhantomData };
            Ok::<_, BoxError>(Box::new(writer) as Box<dyn ForeignWriter>)
        };
        Some(within(WAIT_LIMIT, "the other writer's transaction", open).await)
    }
}

/// The deadlock race's other writer: a plain transaction on its own connection, begun with
/// its first lock (`BEGIN` takes no lock, so the race sees no difference).
pub struct PlainWriter<DB: Database> {
    conn: DB::Connection,
    lock: String,
    begun: bool,
    db: PhantomData<fn() -> DB>,
}

#[async_trait]
impl<DB: Database> ForeignWriter for PlainWriter<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    async fn lock(&mut self, id: &str) -> Result<(), BoxError> {
        if !std::mem::replace(&mut self.begun, true) {
            (&mut self.conn).execute("BEGIN").await?;
        }
        sqlx::query::<DB>(&self.lock).bind(id.to_owned()).execute(&mut self.conn).await?;
        Ok(())
    }

    async fn rollback(mut self: Box<Self>) -> Result<(), BoxError> {
        if self.begun {
            (&mut self.conn).execute("ROLLBACK").await?;
        }
        self.conn.close().await?;
        Ok(())
    }
}
