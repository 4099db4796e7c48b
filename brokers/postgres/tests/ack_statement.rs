//! The one-statement ack: a childless task's ack is one autocommit statement (no `BEGIN`, no
//! `COMMIT` round trip) that writes the acking token into `ack_token`; a parent's ack finds
//! nothing in that statement and takes the transaction that wakes its child. The cuts of that
//! statement's commit (before and after it) are in `cut_connections.rs`.

mod common;

use brokertest::{within, TEST_LIMIT};
use taskgate::{AckItem, Broker, BrokerOptions, ErrorKind, Status, Task};

/// The marker comment that opens the one-statement ack (see `taskgate_sql`'s ack module).
const MARKER: &str = "/* taskgate: one-statement ack */";

fn item(id: &str, token: &str) -> AckItem {
    AckItem { id: id.to_owned(), token: token.to_owned(), result: None }
}

async fn ack_token(
    s: &taskgate_postgres::testing::PgStorage,
    id: &str,
) -> Result<String, taskgate::BoxError> {
    let mut conn = s.admin().await?;
    let sql = format!("SELECT ack_token FROM {}tasks WHERE id = $1", s.prefix());
    Ok(sqlx::query_scalar(&sql).bind(id).fetch_one(&mut conn).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childless_ack_is_one_autocommit_statement() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "a_childless_ack_is_one_autocommit_statement", async move {
        let Some(s) = common::storage("one-statement ack").await else { return Ok(()) };
        let log = taskgate_sql::StatementLog::new();
        let b = s.options()?.record_statements(log.clone()).connect().await?;
        b.init(BrokerOptions::default()).await?;
        b.enqueue(&Task::new("job", "q").with_id("lone")).await?;
        b.enqueue(&Task::new("job", "q").with_id("parent")).await?;
        b.enqueue(&Task::new("job", "q").with_id("child").with_depends_on(["parent"])).await?;

        // A childless task: one statement, the marked one, and nothing else.
        let lone = b.try_dequeue(&["q"]).await?.ok_or("lone was not claimable")?;
        assert_eq!(lone.id, "lone");
        log.take();
        b.ack(&lone.id, &lone.lease_token, Some(b"done".to_vec())).await?;
        let texts = log.texts();
        assert_eq!(texts.len(), 1, "one statement for a childless ack: {texts:#?}");
        assert!(texts[0].starts_with(MARKER), "the one-statement ack: {texts:#?}");
        let done = b.get("lone").await?;
        assert_eq!((done.status, done.result.as_deref()), (Status::Completed, Some(&b"done"[..])));
        assert!(done.lease_token.is_empty() && done.finished_at.is_some());
        assert_eq!(ack_token(&s, "lone").await?, lone.lease_token, "the acking token is kept");
        // Acking again with the same token is a lost lease, as ever (the token is spent).
        let again = b.ack(&lone.id, &lone.lease_token, None).await;
        assert!(again.is_err_and(|e| e.is(ErrorKind::LeaseLost)));

        // A parent: the statement completes nothing; the transaction acks it and wakes the
        // child in the same commit.
        let parent = b.try_dequeue(&["q"]).await?.ok_or("parent was not claimable")?;
        assert_eq!(parent.id, "parent");
        log.take();
        b.ack(&parent.id, &parent.lease_token, None).await?;
        let texts = log.texts();
        assert!(texts.first().is_some_and(|t| t.starts_with(MARKER)), "tried first: {texts:#?}");
        assert!(texts.len() > 1, "then the transaction: {texts:#?}");
        assert_eq!(b.get("parent").await?.status, Status::Completed);
        assert_eq!(ack_token(&s, "parent").await?, "", "the transaction leaves ack_token");
        let child = b.try_dequeue(&["q"]).await?.ok_or("the child was not woken")?;
        assert_eq!(child.id, "child");

        // A batch mixing a good item, a wrong token and an unknown ID: each its own outcome.
        let items = [
            item(&child.id, &child.lease_token),
            item("lone", "not-the-token"),
            item("nobody", "tok"),
        ];
        let outcomes = b.ack_many(&items).await?;
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        assert!(outcomes[1].as_ref().is_err_and(|e| e.is(ErrorKind::LeaseLost)), "{outcomes:?}");
        assert!(outcomes[2].as_ref().is_err_and(|e| e.is(ErrorKind::NotFound)), "{outcomes:?}");
        common::finish(s, &[&b]).await
    })
    .await
}
