//! The claims of one broker handle in flight: which queues have a claim under way
//! ([`ClaimsUnderWay`]) and the dialect's bounds on claims and claimed rows in flight
//! ([`ClaimBounds`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::dialect::Dialect;

/// The claims of one broker handle under way, counted per queue they claim from.
#[derive(Debug, Default)]
pub(crate) struct ClaimsUnderWay(std::sync::Mutex<HashMap<String, usize>>);

/// One claim counted as under way until dropped (a caller that gives up mid-claim included).
pub(crate) struct UnderWay<'a> {
    claims: &'a ClaimsUnderWay,
    queues: &'a [String],
}

impl ClaimsUnderWay {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a claim from `queues` as under way until the guard is dropped.
    pub(crate) fn enter<'a>(&'a self, queues: &'a [String]) -> UnderWay<'a> {
        let mut counts = self.counts();
        for queue in queues {
            *counts.entry(queue.clone()).or_default() += 1;
        }
        UnderWay { claims: self, queues }
    }

    /// True when a claim from any of `queues` is under way.
    pub(crate) fn any(&self, queues: &[String]) -> bool {
        let counts = self.counts();
        queues.iter().any(|q| counts.contains_key(q))
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        let mut counts = self.claims.counts();
        for queue in self.queues {
            if let Some(n) = counts.get_mut(queue) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(queue);
                }
            }
        }
    }
}

/// The bounds on claims in flight of one broker handle ([`Dialect::claim_rows_in_flight`],
/// [`Dialect::claims_in_flight`]): fair (first come, first served) semaphores, one permit per
/// claim and one per row. A claim takes its claim permit first, then its rows, so the two
/// never wait for each other in opposite orders.
pub(crate) struct ClaimBounds {
    claims: Option<Arc<tokio::sync::Semaphore>>,
    rows: Option<(Arc<tokio::sync::Semaphore>, u32)>,
}

/// Room for one claim under the [`ClaimBounds`], held until dropped.
#[derive(Debug)]
pub(crate) struct ClaimSlot {
    _claim: Option<tokio::sync::OwnedSemaphorePermit>,
    _rows: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl ClaimSlot {
    /// The rows this claim holds room for (`None` without a row bound).
    #[cfg(test)]
    fn rows(&self) -> Option<usize> {
        self._rows.as_ref().map(tokio::sync::OwnedSemaphorePermit::num_permits)
    }

    /// True when it holds one of the bounded claims.
    #[cfg(test)]
    fn counted(&self) -> bool {
        self._claim.is_some()
    }
}

impl ClaimBounds {
    /// The bounds `dialect` asks for, if any.
    pub(crate) fn of(dialect: &dyn Dialect) -> Option<ClaimBounds> {
        let bounds =
            ClaimBounds::with_bounds(dialect.claim_rows_in_flight(), dialect.claims_in_flight());
        (bounds.claims.is_some() || bounds.rows.is_some()).then_some(bounds)
    }

    /// Bounds of at most `rows` rows and `claims` claims in flight (each at least one).
    fn with_bounds(rows: Option<usize>, claims: Option<usize>) -> ClaimBounds {
        let max = tokio::sync::Semaphore::MAX_PERMITS;
        let semaphore = |n: usize| Arc::new(tokio::sync::Semaphore::new(n.clamp(1, max)));
        ClaimBounds {
            claims: claims.map(semaphore),
            rows: rows.map(|n| {
                let bound = u32::try_from(n.clamp(1, max)).unwrap_or(u32::MAX);
                (semaphore(n), bound)
            }),
        }
    }

    /// Waits until a claim for `max` tasks may go ahead: one claim permit, then `min(max,
    /// bound)` row permits (at least one), held until the returned slot is dropped, so a claim
    /// larger than the row bound runs alone rather than never. `None` only if a semaphore
    /// were closed, which they never are.
    pub(crate) async fn enter(&self, max: usize) -> Option<ClaimSlot> {
        let claim = match &self.claims {
            Some(claims) => Some(claims.clone().acquire_owned().await.ok()?),
            None => None,
        };
        let rows = match &self.rows {
            Some((rows, bound)) => {
                let n = u32::try_from(max).unwrap_or(u32::MAX).clamp(1, *bound);
                Some(rows.clone().acquire_many_owned(n).await.ok()?)
            }
            None => None,
        };
        Some(ClaimSlot { _claim: claim, _rows: rows })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::tests::DollarDialect;

    #[tokio::test]
    async fn the_claim_bounds_bound_rows_in_flight_and_lets_a_larger_claim_run_alone() {
        assert!(ClaimBounds::of(&DollarDialect).is_none());
        let bounds = ClaimBounds::with_bounds(Some(250), None);
        let a = bounds.enter(100).await.expect("room for the first claim");
        let b = bounds.enter(100).await.expect("room for the second claim");
        // 50 rows left: a third claim of 100 waits until one of the first two ends.
        let third = tokio::time::timeout(Duration::from_millis(50), bounds.enter(100)).await;
        assert!(third.is_err(), "a third claim of 100 must wait");
        drop(a);
        let c = bounds.enter(100).await.expect("room once a claim ended");
        drop((b, c));
        // A claim larger than the bound takes the whole bound, never more.
        let big = bounds.enter(10_000).await.expect("a claim above the bound runs alone");
        assert_eq!((big.rows(), big.counted()), (Some(250), false));
        // Claims of one are bounded at one row each.
        drop(big);
        let ones: Vec<_> = hold_ones(&bounds, 250).await;
        assert_eq!(ones.len(), 250);
    }

    #[tokio::test]
    async fn the_claim_bounds_bound_claims_in_flight_whatever_their_size() {
        let bounds = ClaimBounds::with_bounds(Some(800), Some(4));
        // Four claims of one: the claim bound, not the rows, keeps the fifth out.
        let ones = hold_ones(&bounds, 4).await;
        assert!(ones.iter().all(|slot| slot.counted() && slot.rows() == Some(1)));
        let fifth = tokio::time::timeout(Duration::from_millis(50), bounds.enter(1)).await;
        assert!(fifth.is_err(), "a fifth claim must wait for one of the four");
        drop(ones);
        // Rows still bound: two claims of 400 fill them, a third claim waits for rows while
        // holding its claim permit, and enters once one of the two ends.
        let (a, b) = (bounds.enter(400).await.expect("a"), bounds.enter(400).await.expect("b"));
        let third = tokio::time::timeout(Duration::from_millis(50), bounds.enter(1)).await;
        assert!(third.is_err(), "no row left for a third claim");
        drop(a);
        let c = bounds.enter(400).await.expect("room once a claim ended");
        drop((b, c));
        // Claims alone: no row permits taken.
        let counted = ClaimBounds::with_bounds(None, Some(2));
        let slot = counted.enter(5_000).await.expect("a claim under the claim bound");
        assert_eq!((slot.rows(), slot.counted()), (None, true));
    }

    #[test]
    fn claims_under_way_are_counted_per_queue_until_dropped() {
        let claims = ClaimsUnderWay::default();
        let (ab, b) = (["a".to_owned(), "b".to_owned()], ["b".to_owned()]);
        let (c, a) = (["c".to_owned()], ["a".to_owned()]);
        assert!(!claims.any(&ab));
        let first = claims.enter(&ab);
        let second = claims.enter(&b);
        assert!(claims.any(&a) && claims.any(&b) && !claims.any(&c));
        drop(first);
        assert!(!claims.any(&a) && claims.any(&b), "b is still claimed by the second");
        drop(second);
        assert!(!claims.any(&ab));
    }

    async fn hold_ones(bounds: &ClaimBounds, n: usize) -> Vec<ClaimSlot> {
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(bounds.enter(1).await.expect("room for a claim of one"));
        }
        held
    }
}
