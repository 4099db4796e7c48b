//! The runtime configuration (runtime spec §12.1): queues, routes, the default queue, the caps
//! and the completer, deserialisable from YAML/JSON, validated once into [`Resolved`] so a bad
//! setting is an error at start, never a panic later.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use taskgate::{QuotaConfig, DEFAULT_LEASE_LOST_MAX, DEFAULT_LEASE_TTL, DEFAULT_THROTTLED_MAX};

use crate::duration::serde_go;
use crate::{Error, Result};

/// What the runtime runs and how. The library never reads files or the environment: the
/// application deserialises this and hands it over.
///
/// ```
/// use taskgate_worker::Config;
///
/// let config: Config = serde_json::from_str(r#"{
///     "queues": { "email": { "workers": 4, "rps": 10, "lease_ttl": "30s" } },
///     "routes": { "send_email": "email" }
/// }"#).unwrap();
/// assert_eq!(config.queues["email"].workers, 4);
/// assert_eq!(serde_json::to_value(&config.queues["email"]).unwrap()["lease_ttl"], "30s");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Configured queues by name.
    pub queues: BTreeMap<String, QueueConfig>,
    /// Task type → queue. A type without a route runs on its job's queue, else the queue named
    /// like the type.
    pub routes: BTreeMap<String, String>,
    /// Settings for queues that are not configured; `None` makes an unconfigured queue an
    /// error. Default: one worker, 60 s lease.
    pub default_queue: Option<QueueConfig>,
    /// Lease expiries that fail a task; 0 means 3.
    pub lease_lost_max: u32,
    /// Throttled failures that fail a task; 0 means 100.
    pub throttled_max: u32,
    /// How finished tasks are acked.
    pub completer: CompleterConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            queues: BTreeMap::new(),
            routes: BTreeMap::new(),
            default_queue: Some(QueueConfig::default()),
            lease_lost_max: 0,
            throttled_max: 0,
            completer: CompleterConfig::default(),
        }
    }
}

impl Config {
    /// A config with every default (each job on its own queue, one worker each).
    pub fn new() -> Self {
        Config::default()
    }

    /// Adds (or replaces) a queue.
    pub fn queue(mut self, name: impl Into<String>, queue: QueueConfig) -> Self {
        self.queues.insert(name.into(), queue);
        self
    }

    /// Routes task type `kind` to `queue`.
    pub fn route(mut self, kind: impl Into<String>, queue: impl Into<String>) -> Self {
        self.routes.insert(kind.into(), queue.into());
        self
    }

    /// Sets (or, with `None`, removes) the default queue.
    pub fn default_queue(mut self, queue: Option<QueueConfig>) -> Self {
        self.default_queue = queue;
        self
    }
}

/// One queue's workers, rate, lease and quota.
///
/// ```
/// use std::time::Duration;
/// use taskgate_worker::QueueConfig;
///
/// let q = QueueConfig::workers(8).rps(20.0).lease_ttl(Duration::from_secs(30));
/// assert_eq!((q.workers, q.burst), (8, 0)); // burst 0 means max(1, floor(rps))
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueConfig {
    /// Handlers running at once (at least 1).
    pub workers: u32,
    /// Handler starts per second; 0 means unlimited.
    pub rps: f64,
    /// Token bucket size; 0 means `max(1, floor(rps))`.
    pub burst: u32,
    /// Lease length; heartbeats renew it every third of it. 0 means 60 s.
    #[serde(with = "serde_go")]
    pub lease_ttl: Duration,
    /// The handler renews its lease itself (`JobContext::renew_lease`); no automatic
    /// heartbeats.
    pub manual_heartbeat: bool,
    /// Handler starts per quota window across every process; 0 disables the quota.
    pub quota_limit: u32,
    /// Quota window length (whole seconds, at least 1 s).
    #[serde(with = "serde_go")]
    pub quota_period: Duration,
    /// Quota budget key; empty means the queue's name.
    pub quota_key: String,
    /// The most tasks claimed ahead of the free workers and held here until a worker is free
    /// (0: a claim takes at most the free workers). The runtime claims ahead only as far as
    /// the handlers finish in about two claim round trips, so slow handlers never hoard tasks;
    /// held tasks' leases are renewed by heartbeats, and shutdown requeues them unchanged.
    /// Never used on a queue with `rps` or a quota (their gates count handler starts).
    /// Default [`DEFAULT_PREFETCH`].
    pub prefetch: u32,
}

/// The default [`QueueConfig::prefetch`].
pub const DEFAULT_PREFETCH: u32 = 512;

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            workers: 1,
            rps: 0.0,
            burst: 0,
            lease_ttl: Duration::ZERO,
            manual_heartbeat: false,
            quota_limit: 0,
            quota_period: Duration::ZERO,
            quota_key: String::new(),
            prefetch: DEFAULT_PREFETCH,
        }
    }
}

impl QueueConfig {
    /// A queue with `n` workers and every other default.
    pub fn workers(n: u32) -> Self {
        QueueConfig { workers: n, ..QueueConfig::default() }
    }

    /// Limits handler starts to `rps` per second.
    pub fn rps(mut self, rps: f64) -> Self {
        self.rps = rps;
        self
    }

    /// Sets the token bucket size.
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// Sets the lease length.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Turns automatic heartbeats off.
    pub fn manual_heartbeat(mut self) -> Self {
        self.manual_heartbeat = true;
        self
    }

    /// Caps handler starts at `limit` per `period` across every process.
    pub fn quota(mut self, limit: u32, period: Duration) -> Self {
        self.quota_limit = limit;
        self.quota_period = period;
        self
    }

    /// Claims at most `tasks` ahead of the free workers (0: never ahead).
    pub fn prefetch(mut self, tasks: u32) -> Self {
        self.prefetch = tasks;
        self
    }
}

/// How finished tasks are acked: grouped into `ack_many` (flush at `max_batch` items or
/// `max_wait` after the first), or one by one.
///
/// A batched ack is written after the handler's slot is free again, so a crash before the
/// flush re-runs the task after its lease expires (at-least-once); shutdown flushes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompleterConfig {
    /// Ack each task on its own, before its slot is released (no batching).
    pub inline: bool,
    /// Flush when this many acks wait (at least 1). While every flush in flight is busy (the
    /// database is the bottleneck), the waiting batch keeps growing, up to ten times this.
    pub max_batch: usize,
    /// Flush this long after the first waiting ack.
    #[serde(with = "serde_go")]
    pub max_wait: Duration,
}

impl Default for CompleterConfig {
    fn default() -> Self {
        CompleterConfig { inline: false, max_batch: 100, max_wait: Duration::from_millis(5) }
    }
}

impl CompleterConfig {
    /// One ack per task.
    pub fn inline() -> Self {
        CompleterConfig { inline: true, ..CompleterConfig::default() }
    }

    /// Batches of up to `max_batch`, flushed at the latest `max_wait` after the first.
    pub fn batched(max_batch: usize, max_wait: Duration) -> Self {
        CompleterConfig { inline: false, max_batch, max_wait }
    }
}

/// One queue's settings with every default applied.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct QueueSettings {
    pub(crate) workers: usize,
    pub(crate) rps: f64,
    pub(crate) burst: u32,
    pub(crate) lease_ttl: Duration,
    pub(crate) manual_heartbeat: bool,
    pub(crate) quota: Option<QuotaConfig>,
    /// Tasks claimed ahead at most; 0 where `rps` or a quota gate handler starts.
    pub(crate) prefetch: usize,
}

/// A validated [`Config`].
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub(crate) queues: HashMap<String, QueueSettings>,
    pub(crate) routes: HashMap<String, String>,
    pub(crate) default_queue: Option<QueueSettings>,
    pub(crate) lease_lost_max: u32,
    pub(crate) throttled_max: u32,
    pub(crate) completer: CompleterConfig,
}

impl Resolved {
    /// Validates `config` (runtime spec §12.1, contract §9.2).
    pub(crate) fn new(config: &Config) -> Result<Resolved> {
        let mut queues = HashMap::new();
        for (name, q) in &config.queues {
            taskgate::validate::validate_name("queue", name, false)
                .map_err(|e| Error::config(format!("queues.{name}"), e.to_string()))?;
            queues.insert(name.clone(), settings(&format!("queues.{name}"), name, q)?);
        }
        let default_queue = match &config.default_queue {
            Some(q) => Some(settings("default_queue", "default_queue", q)?),
            None => None,
        };
        for (kind, queue) in &config.routes {
            taskgate::validate::validate_name("queue", queue, false)
                .map_err(|e| Error::config(format!("routes.{kind}"), e.to_string()))?;
            if !queues.contains_key(queue) && default_queue.is_none() {
                return Err(Error::config(
                    format!("routes.{kind}"),
                    format!("queue {queue:?} is not configured and there is no default queue"),
                ));
            }
        }
        check_shared_quota_keys(config)?;
        let c = &config.completer;
        if !c.inline && (c.max_batch == 0 || c.max_wait.is_zero()) {
            return Err(Error::config("completer", "max_batch and max_wait must be positive"));
        }
        Ok(Resolved {
            queues,
            routes: config.routes.clone().into_iter().collect(),
            default_queue,
            lease_lost_max: non_zero(config.lease_lost_max, DEFAULT_LEASE_LOST_MAX),
            throttled_max: non_zero(config.throttled_max, DEFAULT_THROTTLED_MAX),
            completer: config.completer.clone(),
        })
    }

    /// The queue a task type runs on: its route, else the job's own queue, else its name
    /// (runtime spec §12.2). The name must be configured or covered by the default queue.
    pub(crate) fn queue_for(&self, kind: &str, job_queue: Option<&str>) -> Result<String> {
        let name = self.routes.get(kind).map(String::as_str).or(job_queue).unwrap_or(kind);
        self.settings(name)?;
        Ok(name.to_owned())
    }

    /// The settings of queue `name` (its own, else the default queue's).
    pub(crate) fn settings(&self, name: &str) -> Result<&QueueSettings> {
        self.queues
            .get(name)
            .or(self.default_queue.as_ref())
            .ok_or_else(|| Error::UnknownQueue(name.to_owned()))
    }

    /// Broker options' lease TTLs: every configured queue's, and the default queue's.
    pub(crate) fn lease_ttls(&self) -> (HashMap<String, Duration>, Duration) {
        let map = self.queues.iter().map(|(k, q)| (k.clone(), q.lease_ttl)).collect();
        let default = self.default_queue.as_ref().map_or(DEFAULT_LEASE_TTL, |q| q.lease_ttl);
        (map, default)
    }
}

fn non_zero(v: u32, default: u32) -> u32 {
    if v == 0 {
        default
    } else {
        v
    }
}

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "rps is finite and non-negative here; `as` saturates at u32::MAX"
)]
fn floor_u32(rps: f64) -> u32 {
    rps.floor() as u32
}

fn settings(path: &str, queue: &str, q: &QueueConfig) -> Result<QueueSettings> {
    if q.workers == 0 {
        return Err(Error::config(format!("{path}.workers"), "must be at least 1"));
    }
    if !q.rps.is_finite() || q.rps < 0.0 {
        return Err(Error::config(format!("{path}.rps"), format!("{} must be >= 0", q.rps)));
    }
    let burst = match (q.burst, q.rps) {
        (0, rps) => floor_u32(rps).max(1),
        (b, _) => b,
    };
    let quota = if q.quota_limit > 0 {
        let quota =
            QuotaConfig { limit: q.quota_limit, period: q.quota_period, key: q.quota_key.clone() };
        quota.resolve(queue).map_err(|e| Error::config(format!("{path}.quota"), e.to_string()))?;
        Some(quota)
    } else {
        None
    };
    Ok(QueueSettings {
        workers: usize::try_from(q.workers).unwrap_or(usize::MAX),
        rps: q.rps,
        burst,
        lease_ttl: if q.lease_ttl.is_zero() { DEFAULT_LEASE_TTL } else { q.lease_ttl },
        manual_heartbeat: q.manual_heartbeat,
        prefetch: match q.rps > 0.0 || quota.is_some() {
            true => 0,
            false => usize::try_from(q.prefetch).unwrap_or(usize::MAX),
        },
        quota,
    })
}

/// Queues sharing a quota key must agree on limit and period (contract §9.2); the default
/// queue takes part only when its key is set explicitly.
fn check_shared_quota_keys(config: &Config) -> Result<()> {
    let mut seen: HashMap<String, (u32, Duration, String)> = HashMap::new();
    let explicit_default = config.default_queue.iter().filter(|q| !q.quota_key.is_empty());
    let named = config.queues.iter().map(|(n, q)| (n.as_str(), q));
    let all = named.chain(explicit_default.map(|q| ("default_queue", q)));
    for (name, q) in all.filter(|(_, q)| q.quota_limit > 0) {
        let key = if q.quota_key.is_empty() { name.to_owned() } else { q.quota_key.clone() };
        match seen.get(&key) {
            Some((limit, period, first))
                if (*limit, *period) != (q.quota_limit, q.quota_period) =>
            {
                return Err(Error::config(
                    format!("queues.{name}.quota_key"),
                    format!("quota key {key:?} is shared with {first} but limit/period differ"),
                ));
            }
            Some(_) => {}
            None => {
                seen.insert(key, (q.quota_limit, q.quota_period, name.to_owned()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(config: &Config) -> String {
        match Resolved::new(config) {
            Ok(_) => panic!("config accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults_resolve() {
        let r = Resolved::new(&Config::default()).unwrap();
        assert_eq!(r.queue_for("email", None).unwrap(), "email");
        assert_eq!(r.queue_for("email", Some("mail")).unwrap(), "mail");
        let s = r.settings("anything").unwrap();
        assert_eq!((s.workers, s.burst, s.lease_ttl), (1, 1, DEFAULT_LEASE_TTL));
        assert_eq!((r.lease_lost_max, r.throttled_max), (3, 100));
    }

    #[test]
    fn routes_win_and_need_a_queue() {
        let c = Config::new().default_queue(None).queue("fast", QueueConfig::workers(8));
        let r = Resolved::new(&c.clone().route("ping", "fast")).unwrap();
        assert_eq!(r.queue_for("ping", Some("other")).unwrap(), "fast");
        assert!(matches!(r.queue_for("pong", None), Err(Error::UnknownQueue(q)) if q == "pong"));
        assert_eq!(
            err(&c.route("ping", "slow")),
            "invalid config: routes.ping: queue \"slow\" is not configured and there is no default queue"
        );
    }

    #[test]
    fn bad_queues_are_named() {
        let bad = |q: QueueConfig| err(&Config::new().queue("q", q));
        assert_eq!(
            bad(QueueConfig::workers(0)),
            "invalid config: queues.q.workers: must be at least 1"
        );
        assert!(bad(QueueConfig::default().rps(-1.0)).contains("queues.q.rps"));
        let quota = QueueConfig::default().quota(3, Duration::from_millis(1500));
        assert!(bad(quota).contains("queues.q.quota"));
        let two = Config::new()
            .queue(
                "a",
                QueueConfig {
                    quota_key: "k".into(),
                    ..QueueConfig::default().quota(3, Duration::from_secs(2))
                },
            )
            .queue(
                "b",
                QueueConfig {
                    quota_key: "k".into(),
                    ..QueueConfig::default().quota(4, Duration::from_secs(2))
                },
            );
        assert!(err(&two).contains("shared with a"));
    }

    #[test]
    fn burst_defaults_to_floor_of_rps() {
        let r = Resolved::new(&Config::new().queue("q", QueueConfig::default().rps(2.5))).unwrap();
        assert_eq!(r.settings("q").unwrap().burst, 2);
    }

    #[test]
    fn round_trips_go_durations() {
        let c =
            Config::new().queue("q", QueueConfig::default().lease_ttl(Duration::from_secs(600)));
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["queues"]["q"]["lease_ttl"], "10m0s");
        let back: Config = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
        let unknown = serde_json::from_str::<Config>(r#"{"queues":{"q":{"worker":1}}}"#);
        assert!(unknown.is_err());
    }
}
