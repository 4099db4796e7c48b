//! Transactional enqueue behind `dyn Broker` (extensions §E15): the caller's transaction
//! travels type-erased, and the backend takes it back as its own type or names the mismatch.

use std::any::Any;
use std::ops::DerefMut;

use async_trait::async_trait;

use crate::{Error, Result, Task};

/// A caller's open database transaction, type-erased so it can pass through code that holds
/// only a `dyn Broker` (the worker runtime's `Client::submit_in`).
pub struct CallerTx<'a> {
    tx: &'a mut (dyn Any + Send),
    type_name: &'static str,
}

impl<'a> CallerTx<'a> {
    /// Wraps the caller's transaction (for the SQL backends a `sqlx::Transaction<'static, DB>`,
    /// as `pool.begin()` returns it).
    pub fn new<T: Any + Send>(tx: &'a mut T) -> Self {
        CallerTx { tx, type_name: std::any::type_name::<T>() }
    }

    /// The Rust type of the wrapped transaction.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The connection of the backend's transaction: the caller passed either the
    /// transaction `T` itself (`sqlx::Transaction<'static, DB>`, as `pool.begin()` returns it)
    /// or its connection `T::Target` (`&mut *tx`, for a transaction begun on a connection the
    /// caller owns). Any other type is `InvalidInput { field: "transaction" }` naming the
    /// `backend`, the types it takes and the type it got. Whether a connection is inside a
    /// transaction is the backend's to check.
    pub fn connection<T>(self, backend: &str) -> Result<&'a mut T::Target>
    where
        T: Any + DerefMut,
        T::Target: Any + Sized,
    {
        let got = self.type_name;
        let conn = match self.tx.is::<T>() {
            true => self.tx.downcast_mut::<T>().map(|tx| &mut **tx),
            false => self.tx.downcast_mut::<T::Target>(),
        };
        conn.ok_or_else(|| {
            let (tx, conn) = (std::any::type_name::<T>(), std::any::type_name::<T::Target>());
            let takes = format!("a {tx} or its connection ({conn})");
            Error::invalid(
                "transaction",
                format!("the {backend} broker enqueues in {takes}, not a {got}"),
            )
        })
    }
}

impl std::fmt::Debug for CallerTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerTx").field("type", &self.type_name).finish()
    }
}

/// Enqueue inside the caller's own database transaction, for callers that hold a
/// `dyn Broker` (extensions §E15). A backend that declares
/// [`Capabilities::transactional_enqueue`](crate::Capabilities::transactional_enqueue) returns
/// it from [`Broker::tx_enqueue`](crate::Broker::tx_enqueue).
#[async_trait]
pub trait TxEnqueue: Send + Sync {
    /// Stores `task` inside `tx`, with the same validation and errors as
    /// [`Broker::enqueue`](crate::Broker::enqueue): invisible to claimers until the caller
    /// commits, gone if it rolls back. A transaction of another type than the backend's is
    /// `InvalidInput { field: "transaction" }`.
    async fn enqueue_in_tx(&self, tx: CallerTx<'_>, task: &Task) -> Result<Task>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transaction_or_its_connection_is_taken_and_other_types_are_named() {
        let mut tx = Box::new(7u32);
        assert_eq!(CallerTx::new(&mut tx).connection::<Box<u32>>("sqlite").ok().copied(), Some(7));
        let mut conn = 8u32;
        let got = CallerTx::new(&mut conn).connection::<Box<u32>>("sqlite").ok().copied();
        assert_eq!(got, Some(8));
        let mut other = String::from("not a transaction");
        let err = CallerTx::new(&mut other).connection::<Box<u32>>("sqlite").err();
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        let want = "the sqlite broker enqueues in a alloc::boxed::Box<u32> or its connection \
                    (u32), not a alloc::string::String";
        assert!(text.contains(want), "{text}");
    }
}
