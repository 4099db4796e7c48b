//! Bad input is rejected before any SQL runs: a malicious prefix or a bad URL never reaches the
//! server (they fail against an address nothing listens on, and the server is never asked),
//! and invalid task fields fail with `InvalidInput` even when the database is unreachable.

mod common;

use brokertest::{within, TEST_LIMIT};
use sqltest::cutproxy;
use taskgate::{Broker, Error, ErrorKind, ManualClock, Task};
use taskgate_postgres::{PgBroker, PgOptions};

/// A URL nothing listens on: any I/O would fail with a backend error, not `InvalidInput`.
const DEAD: &str = "postgres://postgres@127.0.0.1:1/test";

fn field_of(e: &Error) -> Option<&'static str> {
    match e {
        Error::InvalidInput { field, .. } => Some(field),
        _ => None,
    }
}

#[tokio::test]
async fn malicious_prefixes_are_rejected_before_io() {
    within(TEST_LIMIT, "malicious_prefixes_are_rejected_before_io", async move {
        for prefix in ["x; DROP TABLE", "x; DROP TABLE tasks; --", "Tasks", "1x", "a-b", ""] {
            let made = PgOptions::from_url(DEAD).map(|o| o.prefix(prefix));
            let made = match made {
                Ok(o) => o.connect().await.map(|_| ()),
                Err(e) => Err(e),
            };
            let e = made.err();
            assert_eq!(e.as_ref().and_then(field_of), Some("prefix"), "{prefix:?}: {e:?}");
        }
        let long = "p".repeat(31);
        let e = PgOptions::from_url(DEAD)
            .ok()
            .unwrap_or_else(|| panic!("the dead URL parses"))
            .prefix(long)
            .connect_lazy()
            .err();
        assert_eq!(e.as_ref().and_then(field_of), Some("prefix"));
    })
    .await
}

#[tokio::test]
async fn bad_urls_are_typed_errors_naming_the_url() {
    within(TEST_LIMIT, "bad_urls_are_typed_errors_naming_the_url", async move {
        for (url, shown) in [
            ("mysql://root@localhost/test", "mysql://root@localhost/test"),
            ("postgres://u:pw@host:notaport/db", "postgres://u:***@host:notaport/db"),
            ("nonsense", "nonsense"),
        ] {
            match PgBroker::connect(url).await.err() {
                Some(Error::InvalidInput { field: "url", reason }) => {
                    assert!(!reason.contains("pw@"), "password leaked: {reason}");
                    assert!(reason.contains(shown), "{reason}");
                }
                other => panic!("{url}: expected InvalidInput url, got {other:?}"),
            }
        }
    })
    .await
}

#[tokio::test]
async fn an_unreachable_server_fails_init_with_a_backend_error() {
    within(TEST_LIMIT, "an_unreachable_server_fails_init_with_a_backend_error", async move {
        let broker = PgOptions::from_url(DEAD)
            .map(|o| o.acquire_timeout(std::time::Duration::from_secs(2)))
            .ok()
            .unwrap_or_else(|| panic!("the dead URL parses"));
        let broker = match broker.connect_lazy() {
            Ok(b) => b,
            Err(e) => panic!("connect_lazy does no I/O, so it succeeds: {e}"),
        };
        let e = broker.init(common::options(&ManualClock::at_contract_epoch())).await.err();
        assert!(e.as_ref().is_some_and(|e| e.is(ErrorKind::Backend)), "{e:?}");
        let e = broker.enqueue(&Task::new("job", "q")).await.err();
        assert!(e.is_some_and(|e| e.is(ErrorKind::NotInitialized)));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_tasks_fail_before_any_statement() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "invalid_tasks_fail_before_any_statement", async move {
        let Some(s) = common::storage("bad input").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        // The handle reaches the server through a proxy that is then shut: from now on every
        // statement fails (pooled, on a lane or on a new connection), so only checks made
        // before any I/O can answer.
        let (proxy, _) = cutproxy::start_for_url(s.url()).await?;
        let at = proxy.addr();
        // A short acquire timeout: `close` waits for a transaction's connect attempts
        // (begun on a task of their own) to give up.
        let b = common::handle(&s, &clock, |o| {
            o.tune_connect(|c| c.host(&at.ip().to_string()).port(at.port()))
                .acquire_timeout(std::time::Duration::from_secs(2))
        })
        .await?;
        proxy.refuse().await;
        let valid = b.enqueue(&Task::new("job", "q")).await.err();
        assert!(valid.is_some_and(|e| e.is(ErrorKind::Backend)), "the server is unreachable");
        let cases: Vec<(Task, &str)> = vec![
            (Task::new("", "q"), "type"),
            (Task::new("job", "q").with_id("i".repeat(256)), "id"),
            (Task::new("job", "q\u{0}"), "queue"),
            (Task::new("job", "q").with_payload(vec![0; 17 * 1024 * 1024]), "payload"),
        ];
        for (task, field) in cases {
            let e = b.enqueue(&task).await.err();
            assert_eq!(e.as_ref().and_then(field_of), Some(field), "{e:?}");
        }
        let e = b.get("").await.err();
        assert_eq!(e.as_ref().and_then(field_of), Some("id"));
        let e = b.dequeue_many(&[] as &[&str; 0], 1).await.err();
        assert_eq!(e.as_ref().and_then(field_of), Some("queues"));
        let e = b.ack(&"x".repeat(300), "tok", None).await.err();
        assert_eq!(e.as_ref().and_then(field_of), Some("id"));
        common::finish(s, &[&b]).await
    })
    .await
}
