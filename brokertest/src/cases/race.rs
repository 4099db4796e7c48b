//! The reaper racing a finishing worker (extensions §E16, contract §6).

use std::sync::Arc;
use std::time::Duration;

use taskgate::{Broker, ErrorKind, Status, Task};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

use crate::{task, CaseResult, Factory, Harness, SAFETY_TIMEOUT};

/// Rounds of c32.
const ROUNDS: usize = 40;
/// Expired claims per round.
const EXPIRED: usize = 3;
/// Fresh claims per round.
const FRESH: usize = 2;

/// Given two handles on one storage, in each of 40 rounds three tasks whose leases expired
/// (claimed 61 s ago, TTL 60 s) and two freshly claimed tasks, when a worker acks all five
/// (each ack its own concurrent call, on one handle) while a reaper runs concurrently on each
/// handle, then each expired task either is completed with its result and LeaseLost 0 (its
/// ack won) or its ack got `LeaseLost` and it is pending with LeaseLost 1, no token and no
/// result (a reaper won) — never both, never failed; the reapers' counts add up to exactly the
/// acks that lost; every fresh task is completed with its result and LeaseLost 0; and a later
/// reap finds nothing.
pub async fn c32_reap_race(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let handles = [h.broker.clone(), h.second_handle().await?];
    for round in 0..ROUNDS {
        let (expired, fresh) = claim_round(&h, round).await;
        let worker = handles[round % 2].clone();
        let outcome = race(&worker, &handles, &expired, &fresh).await;
        check_round(&h, round, &expired, &fresh, outcome).await?;
    }
    h.finish().await
}

/// Claims the round's expired tasks, advances 61 s, then claims the fresh ones.
async fn claim_round(h: &Harness, round: usize) -> (Vec<Task>, Vec<Task>) {
    let (eq, fq) = (format!("e{round}"), format!("f{round}"));
    for k in 0..EXPIRED {
        h.enqueue(task(&format!("r{round}-e{k}"), "job", &eq)).await;
    }
    for k in 0..FRESH {
        h.enqueue(task(&format!("r{round}-f{k}"), "job", &fq)).await;
    }
    let mut expired = Vec::new();
    for _ in 0..EXPIRED {
        expired.push(h.dequeue(&[eq.as_str()]).await);
    }
    h.advance(Duration::from_secs(61));
    let mut fresh = Vec::new();
    for _ in 0..FRESH {
        fresh.push(h.dequeue(&[fq.as_str()]).await);
    }
    (expired, fresh)
}

/// What one round's calls returned: each ack's error kind (None = Ok) in task order, then the
/// reapers' total count.
struct Outcome {
    acks: Vec<Option<ErrorKind>>,
    reaped: u64,
}

async fn race(
    worker: &Arc<dyn Broker>,
    handles: &[Arc<dyn Broker>; 2],
    expired: &[Task],
    fresh: &[Task],
) -> Outcome {
    let barrier = Arc::new(Barrier::new(EXPIRED + FRESH + 2));
    let acks: Vec<JoinHandle<Option<ErrorKind>>> = expired
        .iter()
        .chain(fresh)
        .map(|t| {
            let (b, barrier) = (worker.clone(), barrier.clone());
            let (id, token) = (t.id.clone(), t.lease_token.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                b.ack(&id, &token, Some(id.clone().into_bytes())).await.err().map(|e| e.kind())
            })
        })
        .collect();
    let reapers: Vec<JoinHandle<u64>> = handles
        .iter()
        .map(|b| {
            let (b, barrier) = (b.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                match b.reap_expired().await {
                    Ok(n) => n,
                    Err(e) => panic!("a concurrent reap failed: {e}"),
                }
            })
        })
        .collect();
    let mut outcome = Outcome { acks: Vec::new(), reaped: 0 };
    for ack in acks {
        outcome.acks.push(joined(ack).await);
    }
    for reaper in reapers {
        outcome.reaped += joined(reaper).await;
    }
    outcome
}

async fn joined<T>(call: JoinHandle<T>) -> T {
    match tokio::time::timeout(SAFETY_TIMEOUT, call).await {
        Ok(Ok(v)) => v,
        Ok(Err(join)) => panic!("a racing call panicked: {join}"),
        Err(_) => panic!("a racing call did not return within {SAFETY_TIMEOUT:?}"),
    }
}

async fn check_round(
    h: &Harness,
    round: usize,
    expired: &[Task],
    fresh: &[Task],
    outcome: Outcome,
) -> CaseResult {
    let (expired_acks, fresh_acks) = outcome.acks.split_at(EXPIRED);
    let mut lost = 0;
    for (claim, ack) in expired.iter().zip(expired_acks) {
        match ack {
            None => assert_completed(h, round, &claim.id).await,
            Some(ErrorKind::LeaseLost) => {
                lost += 1;
                assert_reaped(h, round, &claim.id).await;
            }
            Some(kind) => panic!("round {round}: ack of expired {} failed with {kind}", claim.id),
        }
    }
    for (claim, ack) in fresh.iter().zip(fresh_acks) {
        assert_eq!(*ack, None, "round {round}: ack of fresh {} must succeed", claim.id);
        assert_completed(h, round, &claim.id).await;
    }
    assert_eq!(outcome.reaped, lost, "round {round}: reaped vs acks that lost their lease");
    assert_eq!(h.broker.reap_expired().await?, 0, "round {round}: a later reap");
    Ok(())
}

async fn assert_completed(h: &Harness, round: usize, id: &str) {
    let t = h.get(id).await;
    let got = (t.status, t.result.as_deref(), t.lease_lost);
    let want = (Status::Completed, Some(id.as_bytes()), 0);
    assert_eq!(got, want, "round {round}: {id}'s ack succeeded: (status, result, lease_lost)");
}

async fn assert_reaped(h: &Harness, round: usize, id: &str) {
    let t = h.get(id).await;
    let got = (t.status, t.lease_lost, t.lease_token.as_str(), t.result.as_deref());
    let want = (Status::Pending, 1, "", None);
    assert_eq!(got, want, "round {round}: {id} was reaped: (status, lease_lost, token, result)");
}
