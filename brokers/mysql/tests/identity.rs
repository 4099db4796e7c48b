//! Input sizes on MySQL: IDs compare by bytes (the server's NO PAD binary collation), hold
//! 255 characters of any width, and a 256-character name is refused before any statement
//! reaches the server; payloads, results and cursors of the largest accepted size fit every
//! statement below the server's `max_allowed_packet`.

mod common;

use brokertest::{within, TEST_LIMIT};
use taskgate::{AckItem, BoxError, Broker, Error, Filter, StorageBound, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_differing_only_in_case_are_two_tasks() -> Result<(), BoxError> {
    within(TEST_LIMIT, "ids_differing_only_in_case_are_two_tasks", async move {
        let Some(storage) = common::storage("ids_differing_only_in_case_are_two_tasks").await
        else {
            return Ok(());
        };
        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options).await?;
        broker.enqueue(&Task::new("lower", "q").with_id("abc")).await?;
        broker.enqueue(&Task::new("upper", "q").with_id("ABC")).await?;
        assert_eq!(broker.get("abc").await?.task_type, "lower");
        assert_eq!(broker.get("ABC").await?.task_type, "upper");
        let dup = broker.enqueue(&Task::new("again", "q").with_id("abc")).await;
        assert!(matches!(dup, Err(Error::TaskExists { existing: None, .. })), "{dup:?}");
        // Byte order: uppercase sorts first, both ways (claims and lists).
        let ids: Vec<String> =
            broker.list(&Filter::default()).await?.into_iter().map(|t| t.id).collect();
        assert_eq!(ids, ["ABC", "abc"]);
        assert_eq!(broker.dequeue(&["q"]).await?.id, "ABC");
        // Keys are case-sensitive too: "K" and "k" are two chains.
        broker.enqueue(&Task::new("t", "q2").with_business_key("k")).await?;
        broker.enqueue(&Task::new("t", "q2").with_business_key("K")).await?;
        let by_key = broker.list(&Filter { business_key: "K".into(), ..Filter::default() }).await?;
        assert_eq!(by_key.len(), 1);
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_255_multibyte_characters_round_trip() -> Result<(), BoxError> {
    within(TEST_LIMIT, "names_of_255_multibyte_characters_round_trip", async move {
        let Some(storage) = common::storage("names_of_255_multibyte_characters_round_trip").await
        else {
            return Ok(());
        };
        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options).await?;
        // 255 four-byte characters (1,020 bytes) in every indexed name column.
        let id = "😀".repeat(255);
        let queue = "队".repeat(254) + "q";
        let task = Task::new("é".repeat(255), queue.clone())
            .with_id(id.clone())
            .with_business_key("ß".repeat(255));
        let stored = broker.enqueue(&task).await?;
        assert_eq!(stored.id, id);
        let got = broker.get(&id).await?;
        assert_eq!(
            (got.task_type.chars().count(), got.queue.clone(), got.business_key.chars().count()),
            (255, queue.clone(), 255)
        );
        let claimed = broker.dequeue(&[queue.as_str()]).await?;
        assert_eq!(claimed.id, id);
        broker.ack(&id, &claimed.lease_token, Some(b"{}".to_vec())).await?;
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_256_characters_fail_before_any_io() -> Result<(), BoxError> {
    within(TEST_LIMIT, "names_of_256_characters_fail_before_any_io", async move {
        let Some(storage) = common::storage("names_of_256_characters_fail_before_any_io").await
        else {
            return Ok(());
        };
        let (options, _clock) = common::manual_options();
        let log = taskgate_sql::StatementLog::new();
        let broker = storage.options()?.record_statements(log.clone()).connect_lazy()?;
        broker.init(options).await?;
        let long = "😀".repeat(256);
        let cases = [
            ("id", Task::new("t", "q").with_id(long.clone())),
            ("type", Task::new(long.clone(), "q")),
            ("queue", Task::new("t", long.clone())),
            ("business_key", Task::new("t", "q").with_business_key(long.clone())),
        ];
        for (field, task) in cases {
            let before = log.count();
            let refused = broker.enqueue(&task).await;
            assert!(
                matches!(&refused, Err(Error::InvalidInput { field: f, .. }) if *f == field),
                "{field}: {refused:?}"
            );
            assert_eq!(log.count(), before, "{field}: a statement ran");
        }
        let before = log.count();
        assert!(matches!(broker.get(&long).await, Err(Error::InvalidInput { field: "id", .. })));
        assert!(matches!(broker.dequeue(&[long.as_str()]).await, Err(Error::InvalidInput { .. })));
        assert_eq!(log.count(), before);
        assert!(broker.list(&Filter::default()).await?.is_empty(), "nothing stored");
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_allowed_lists_and_error_texts_fit() -> Result<(), BoxError> {
    within(TEST_LIMIT, "the_largest_allowed_lists_and_error_texts_fit", async move {
        let Some(storage) = common::storage("the_largest_allowed_lists_and_error_texts_fit").await
        else {
            return Ok(());
        };
        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options).await?;
        // 1,000 parents (the limit) with 255-character multi-byte IDs: ~770 KiB of depends_on JSON.
        let parents: Vec<Task> = (0..1_000)
            .map(|i| Task::new("p", "parents").with_id(format!("{i:04}{}", "字".repeat(251))))
            .collect();
        for chunk in parents.chunks(250) {
            broker.enqueue_many(chunk).await?;
        }
        let ids: Vec<String> = parents.iter().map(|t| t.id.clone()).collect();
        let child = broker
            .enqueue(&Task::new("c", "children").with_id("child").with_depends_on(ids.clone()))
            .await?;
        assert_eq!(child.status, taskgate::Status::Blocked);
        assert_eq!(broker.get("child").await?.depends_on, ids);
        // A 200 KB error text is stored whole.
        broker.enqueue(&Task::new("t", "errs").with_id("noisy")).await?;
        let claimed = broker.dequeue(&["errs"]).await?;
        let text = "stack frame\n".repeat(20_000);
        broker.fail("noisy", &claimed.lease_token, taskgate::Failure::skip(text.clone())).await?;
        assert_eq!(broker.get("noisy").await?.last_error, text);
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

/// The payload limit is the server's `max_allowed_packet` less 8 KiB where that is below the
/// configured size (a configured 1 GiB is capped too, naming the setting), and every statement
/// carrying values of the largest accepted size stays below the server's limit: a task
/// imported with a payload, result and cursor of that size at once, `enqueue_many` of two such
/// payloads and `ack_many` of two such results, all read back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_of_the_largest_size_fit_every_statement() -> Result<(), BoxError> {
    within(TEST_LIMIT, "values_of_the_largest_size_fit_every_statement", async move {
        let Some(storage) = common::storage("values_of_the_largest_size_fit_every_statement").await
        else {
            return Ok(());
        };
        let mut admin = common::connect(&storage).await?;
        let packet: i64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)")
            .fetch_one(&mut admin)
            .await?;
        let packet = u64::try_from(packet)?;
        let bound = StorageBound { setting: "max_allowed_packet", value: packet };
        let (mut options, _clock) = common::manual_options();
        options.max_payload_bytes = 1 << 30;
        let wide = common::handle(&storage, options).await?;
        let limits = wide.limits()?;
        assert_eq!(limits.max_payload_bytes, usize::try_from(packet - 8192)?, "{limits:?}");
        assert_eq!(limits.bound, Some(bound), "a configured 1 GiB is capped by the server");
        wide.close().await?;

        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options).await?;
        let max = broker.limits()?.max_payload_bytes;
        let big: Vec<u8> = (0..max).map(|i| u8::try_from(i % 253).unwrap_or(0)).collect();
        let mut imported = Task::new("t", "imp").with_id("all-three").with_payload(big.clone());
        imported.result = Some(big.clone());
        imported.cursor = Some(big.clone());
        broker.enqueue(&imported).await?;
        drop(imported);
        let got = broker.get("all-three").await?;
        assert!(got.payload.as_ref() == Some(&big), "imported payload");
        assert!(got.result.as_ref() == Some(&big), "imported result");
        assert!(got.cursor.as_ref() == Some(&big), "imported cursor");
        drop(got);

        let two: Vec<Task> = ["m1", "m2"]
            .iter()
            .map(|id| Task::new("t", "two").with_id(*id).with_payload(big.clone()))
            .collect();
        broker.enqueue_many(&two).await?;
        drop(two);
        let claimed = broker.dequeue_many(&["two"], 2).await?;
        assert_eq!(claimed.len(), 2, "both claimed");
        let items: Vec<AckItem> = claimed
            .iter()
            .map(|t| AckItem {
                id: t.id.clone(),
                token: t.lease_token.clone(),
                result: Some(big.clone()),
            })
            .collect();
        drop(claimed);
        for outcome in broker.ack_many(&items).await? {
            outcome?;
        }
        drop(items);
        for id in ["m1", "m2"] {
            let done = broker.get(id).await?;
            assert!(
                done.payload.as_ref() == Some(&big) && done.result.as_ref() == Some(&big),
                "{id}"
            );
        }
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}
