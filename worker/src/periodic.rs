//! Periodic (cron) jobs that run once per tick however many processes schedule them: a tick
//! is due by the broker's clock (not the process's own, which may be off), and its execution
//! is submitted with the business key `periodic:<name>:<tick unix ms>` — the tick's own time,
//! the same in every process — so the first process to submit it wins and the others get
//! `TaskExists`.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use taskgate::{ErrorKind, Task, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::error::chain_text;
use crate::inner::{write_with_retry, Inner};
use crate::job::encode;
use crate::{Error, Job, Result};

/// Ticks missed while the process ran (a suspended machine, a stalled clock) that are still
/// submitted; older ones are skipped, the latest always runs.
const MAX_CATCH_UP: usize = 100;

/// A job submitted on a cron schedule.
///
/// Patterns have 5 fields (`min hour dom month dow`) or 6 with seconds first, plus `L`, `W`,
/// `#` and `@daily`-style nicknames; ticks are computed in the schedule's time zone (UTC
/// unless [`Periodic::time_zone`] says otherwise) and are due by the broker's clock
/// ([`Broker::now`](taskgate::Broker::now)), whatever the process's own clock says. Ticks
/// before the runtime started are not back-filled.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use taskgate_worker::{Job, Periodic};
///
/// #[derive(Clone, Serialize, Deserialize)]
/// struct Report;
/// impl Job for Report {
///     const KIND: &'static str = "report";
///     type Output = ();
/// }
///
/// let nightly = Periodic::new("nightly-report", "0 3 * * *", Report)?
///     .time_zone("Europe/Berlin")?;
/// assert_eq!(nightly.name(), "nightly-report");
/// assert!(Periodic::new("bad", "61 * * * *", Report).is_err());
/// # Ok::<(), taskgate_worker::Error>(())
/// ```
#[derive(Clone)]
pub struct Periodic {
    name: String,
    pattern: String,
    cron: Cron,
    tz: Tz,
    pub(crate) kind: &'static str,
    pub(crate) job_queue: Option<&'static str>,
    pub(crate) payload: Vec<u8>,
    pub(crate) max_retry: u32,
}

impl Periodic {
    /// Submits `job` on every tick of `pattern`. `name` identifies the schedule across
    /// processes: every process running it must use the same name and pattern.
    pub fn new<J: Job>(name: impl Into<String>, pattern: &str, job: J) -> Result<Periodic> {
        let name = name.into();
        let field = || format!("periodic.{name}");
        if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
            return Err(Error::config(field(), "name must be 1-200 printable characters"));
        }
        let cron = Cron::from_str(pattern)
            .map_err(|e| Error::config(field(), format!("cron pattern {pattern:?}: {e}")))?;
        Ok(Periodic {
            pattern: pattern.to_owned(),
            cron,
            tz: Tz::UTC,
            kind: J::KIND,
            job_queue: J::QUEUE,
            payload: encode("payload", J::KIND, &job)?,
            max_retry: J::MAX_RETRY,
            name,
        })
    }

    /// Computes ticks in this IANA time zone (`"Europe/Berlin"`), so `0 3 * * *` is 03:00
    /// local time across daylight-saving changes.
    pub fn time_zone(mut self, zone: &str) -> Result<Periodic> {
        self.tz = Tz::from_str(zone).map_err(|e| {
            Error::config(format!("periodic.{}.time_zone", self.name), format!("{zone:?}: {e}"))
        })?;
        Ok(self)
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cron pattern.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The first tick strictly after `after`, if the pattern ever fires again.
    pub fn next_tick(&self, after: Timestamp) -> Option<Timestamp> {
        let at = DateTime::<Utc>::from_timestamp_millis(after.as_millis())?.with_timezone(&self.tz);
        let next = self.cron.find_next_occurrence(&at, false).ok()?;
        Some(Timestamp::from_millis(next.timestamp_millis()))
    }

    /// The latest tick at or before `at`.
    fn latest_tick(&self, at: Timestamp) -> Option<Timestamp> {
        let at = DateTime::<Utc>::from_timestamp_millis(at.as_millis())?.with_timezone(&self.tz);
        let prev = self.cron.find_previous_occurrence(&at, true).ok()?;
        Some(Timestamp::from_millis(prev.timestamp_millis()))
    }

    /// The business key of the execution for `tick`.
    pub fn key(&self, tick: Timestamp) -> String {
        format!("periodic:{}:{}", self.name, tick.as_millis())
    }
}

impl std::fmt::Debug for Periodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Periodic")
            .field("name", &self.name)
            .field("pattern", &self.pattern)
            .field("time_zone", &self.tz.name())
            .field("kind", &self.kind)
            .finish()
    }
}

/// How long the scheduler waits (on the runtime's clock) before reading the broker's clock
/// again after reading it failed.
const CLOCK_RETRY: Duration = Duration::from_secs(1);

/// The scheduler task: submits every tick that came due by the broker's clock
/// ([`Broker::now`](taskgate::Broker::now), the clock leases are judged by), and between ticks
/// sleeps on the runtime's clock for as long as the broker's clock needs to reach the next
/// one, so a runtime whose own clock is off neither runs ticks early nor late. Ticks after
/// `start` (the broker's clock when the runtime started) count. Stops at shutdown.
pub(crate) async fn run(inner: Arc<Inner>, schedules: Vec<(Periodic, String)>, start: Timestamp) {
    let mut last: Vec<Timestamp> = vec![start; schedules.len()];
    let stop = inner.shutting_down.clone();
    loop {
        let next = schedules.iter().zip(&last).filter_map(|((p, _), l)| p.next_tick(*l)).min();
        let Some(next) = next else { return };
        let local = inner.clock.now_ms();
        let now = tokio::select! {
            now = inner.broker.now() => now,
            () = stop.cancelled() => return,
        };
        let now = match now {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(error = %chain_text(&e), "periodic: reading the broker's clock failed");
                match sleep_until(&inner, &stop, local.saturating_add(CLOCK_RETRY)).await {
                    true => continue,
                    false => return,
                }
            }
        };
        if next > now {
            // Read before the broker's clock, so the wake-up is early rather than late.
            let wake = local.saturating_add(next.duration_since(now));
            match sleep_until(&inner, &stop, wake).await {
                true => continue,
                false => return,
            }
        }
        for ((periodic, queue), last) in schedules.iter().zip(last.iter_mut()) {
            for tick in due_ticks(periodic, *last, now) {
                submit(&inner, periodic, queue, tick).await;
                *last = tick;
            }
        }
    }
}

/// Sleeps on the runtime's clock until it reads `wake`; false when shutdown began first.
async fn sleep_until(inner: &Inner, stop: &CancellationToken, wake: Timestamp) -> bool {
    loop {
        let local = inner.clock.now_ms();
        if local >= wake {
            return true;
        }
        let sleep = inner.clock.sleep(wake.duration_since(local));
        // The clock moved between reading it and registering the sleep, which would then end
        // late by as much: plan again.
        if inner.clock.now_ms() != local {
            continue;
        }
        tokio::select! {
            () = sleep => return true,
            () = stop.cancelled() => return false,
        }
    }
}

/// The ticks in `(after, now]`, at most [`MAX_CATCH_UP`] of them (then the latest one).
fn due_ticks(periodic: &Periodic, after: Timestamp, now: Timestamp) -> Vec<Timestamp> {
    let mut ticks = Vec::new();
    let mut cursor = after;
    while let Some(tick) = periodic.next_tick(cursor).filter(|t| *t <= now) {
        if ticks.len() == MAX_CATCH_UP {
            tracing::warn!(
                schedule = periodic.name(),
                "too many missed ticks; skipping to the latest"
            );
            ticks.extend(periodic.latest_tick(now).filter(|t| *t > tick));
            break;
        }
        ticks.push(tick);
        cursor = tick;
    }
    ticks
}

/// Submits one tick's execution; `TaskExists` means another process already did.
async fn submit(inner: &Inner, periodic: &Periodic, queue: &str, tick: Timestamp) {
    let task = Task::new(periodic.kind, queue)
        .with_payload(periodic.payload.clone())
        .with_business_key(periodic.key(tick))
        .with_max_retry(periodic.max_retry)
        .with_run_at(tick)
        .with_owner(format!("periodic:{}", periodic.name));
    let stored = write_with_retry("periodic submit", || async {
        inner.broker.enqueue(&task).await.map(drop)
    })
    .await;
    match stored {
        Ok(()) => {
            tracing::debug!(schedule = periodic.name(), tick = tick.as_millis(), "tick submitted")
        }
        Err(e) if e.is(ErrorKind::TaskExists) => {
            tracing::debug!(
                schedule = periodic.name(),
                tick = tick.as_millis(),
                "tick submitted elsewhere"
            );
        }
        Err(e) => tracing::error!(schedule = periodic.name(), tick = tick.as_millis(),
            error = %chain_text(&e), "periodic submit failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    struct Tick;
    impl Job for Tick {
        const KIND: &'static str = "tick";
        type Output = ();
    }

    const EPOCH_2026: i64 = 1_767_225_600_000;

    #[test]
    fn ticks_follow_the_pattern_and_time_zone() {
        let every_second = Periodic::new("s", "* * * * * *", Tick).unwrap();
        let start = Timestamp::from_millis(EPOCH_2026);
        assert_eq!(every_second.next_tick(start), Some(Timestamp::from_millis(EPOCH_2026 + 1000)));
        let three_am = Periodic::new("n", "0 3 * * *", Tick).unwrap();
        assert_eq!(
            three_am.next_tick(start),
            Some(Timestamp::from_millis(EPOCH_2026 + 3 * 3_600_000))
        );
        let berlin = three_am.time_zone("Europe/Berlin").unwrap();
        // 03:00 in Berlin (UTC+1 in January) is 02:00 UTC.
        assert_eq!(
            berlin.next_tick(start),
            Some(Timestamp::from_millis(EPOCH_2026 + 2 * 3_600_000))
        );
        assert!(Periodic::new("n", "0 3 * * *", Tick).unwrap().time_zone("Mars/Olympus").is_err());
    }

    #[test]
    fn missed_ticks_are_capped() {
        let every_second = Periodic::new("s", "* * * * * *", Tick).unwrap();
        let start = Timestamp::from_millis(EPOCH_2026);
        let three = due_ticks(&every_second, start, Timestamp::from_millis(EPOCH_2026 + 3_500));
        assert_eq!(three.len(), 3);
        let many = due_ticks(&every_second, start, Timestamp::from_millis(EPOCH_2026 + 1_000_000));
        assert_eq!(many.len(), MAX_CATCH_UP + 1);
        assert_eq!(many.last(), Some(&Timestamp::from_millis(EPOCH_2026 + 1_000_000)));
        assert_eq!(every_second.key(start), format!("periodic:s:{EPOCH_2026}"));
    }
}
