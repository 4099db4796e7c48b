//! Internal tests: the indexes stay consistent with the tasks across every kind of status
//! change (checked after each step of a long random run), claims follow a brute-force
//! `(run_at, id)` scan, and defensive repair (which needs forced state) works.

use std::sync::Arc;
use std::time::Duration;

use taskgate::{
    AckItem, BrokerOptions, Clock, Failure, ManualClock, OnParentFailure, PruneRequest,
    ReplayRequest, ResolvedOptions, Status, Step, Task, Timestamp,
};

use crate::state::State;
use crate::txn::{Store, Txn};

impl State {
    /// Every invariant between the tasks and the indexes; the first broken one as text.
    fn check(&self) -> Result<(), String> {
        let mut claimable = 0;
        for e in self.tasks.values() {
            let (key, t) = (&e.key, &e.task);
            if **key != *t.id || self.tasks.slot_of(key) != Some(e.slot) {
                return Err(format!("{key}: key and id differ, or its slot is not its own"));
            }
            if !self.created.contains(&(t.created_at.as_millis(), key.clone())) {
                return Err(format!("{key}: not in the list index"));
            }
            let lease_ok =
                (t.status == Status::Running) == (e.lease.is_some() && e.lease_until > 0);
            if !t.lease_token.is_empty() {
                return Err(format!("{key}: a stored task spells out its lease token"));
            }
            if !lease_ok {
                return Err(format!("{key}: lease fields disagree with status {}", t.status));
            }
            if t.status.is_terminal() && t.finished_at.is_none() {
                return Err(format!("{key}: finished_at disagrees with status {}", t.status));
            }
            for edge in &e.parents {
                let listed = self.tasks.get(&edge.parent).is_none_or(|p| p.children.contains(key));
                if !listed {
                    return Err(format!("{key}: parent {} does not list it", edge.parent));
                }
            }
            let indexed = match t.status {
                Status::Pending | Status::Retrying => {
                    claimable += 1;
                    let set = self.index.claimable.get(&t.queue);
                    set.is_some_and(|s| s.contains(t.priority, t.run_at.as_millis(), key, e.slot))
                }
                Status::Running => self.index.running.contains(e.slot),
                Status::Blocked => self.index.blocked.contains(key),
                _ => true,
            };
            if !indexed {
                return Err(format!("{key}: missing from the index of {}", t.status));
            }
        }
        self.check_sizes(claimable)
    }

    /// No index holds more than the tasks that belong in it.
    fn check_sizes(&self, claimable: usize) -> Result<(), String> {
        let count = |s: Status| self.tasks.values().filter(|e| e.task.status == s).count();
        let in_sets: usize = self.index.claimable.values().map(|s| s.len).sum();
        let in_levels: usize =
            self.index.claimable.values().flat_map(|s| s.levels.values()).map(|l| l.len()).sum();
        if in_levels != in_sets
            || self.index.claimable.values().any(|s| s.levels.values().any(|l| l.is_empty()))
        {
            return Err(format!(
                "level sizes {in_levels} disagree with counts {in_sets}, or an empty level is kept"
            ));
        }
        let sizes =
            (in_sets, self.index.running.len(), self.index.blocked.len(), self.created.len());
        let want = (claimable, count(Status::Running), count(Status::Blocked), self.tasks.len());
        if sizes == want {
            Ok(())
        } else {
            Err(format!("index sizes {sizes:?}, tasks {want:?}"))
        }
    }

    /// The claims a brute-force scan picks: the `max` smallest `(priority, run_at, id)` ready
    /// in `queues`, in that order.
    fn scan_first(&self, queues: &[&str], now: Timestamp, max: usize) -> Vec<String> {
        let ready = self.tasks.values().map(|e| &e.task).filter(|t| {
            t.status.is_claimable()
                && queues.contains(&t.queue.as_str())
                && !self.paused.contains(&t.queue)
                && t.run_at <= now
        });
        let mut keys: Vec<_> = ready.map(|t| (t.priority, t.run_at, t.id.clone())).collect();
        keys.sort_unstable();
        keys.into_iter().take(max).map(|(_, _, id)| id).collect()
    }
}

/// A tiny deterministic generator (64-bit LCG), so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        usize::try_from((self.0 >> 33) % u64::try_from(n.max(1)).unwrap_or(1)).unwrap_or(0)
    }
}

struct World {
    store: Store,
    clock: ManualClock,
    opts: ResolvedOptions,
    rng: Rng,
    ids: Vec<String>,
}

const QUEUES: [&str; 3] = ["qa", "qb", "qc"];

impl World {
    fn new(seed: u64) -> World {
        let clock = ManualClock::at_contract_epoch();
        let opts =
            BrokerOptions::new().with_clock(Arc::new(clock.clone()) as Arc<dyn Clock>).resolve();
        World { store: Store::default(), clock, opts, rng: Rng(seed), ids: Vec::new() }
    }

    fn write<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> R) -> R {
        match self.store.write(&self.opts, f) {
            Ok(r) => r,
            Err(e) => panic!("store failed: {e}"),
        }
    }

    fn pick(&mut self) -> String {
        let i = self.rng.below(self.ids.len());
        self.ids.get(i).cloned().unwrap_or_else(|| "none".to_owned())
    }

    fn running(&self) -> Vec<(String, String)> {
        let state = self.store.lock().unwrap_or_else(|e| panic!("{e}"));
        let running = state.tasks.values().filter(|e| e.task.status == Status::Running);
        running.map(|e| (e.task.id.clone(), e.snapshot().lease_token)).collect()
    }

    fn leased(&mut self) -> Option<(String, String)> {
        let running = self.running();
        let i = self.rng.below(running.len());
        running.get(i).cloned()
    }

    fn enqueue(&mut self) {
        let queue = QUEUES[self.rng.below(3)];
        let mut task =
            Task::new("job", queue).with_max_retry(u32::try_from(self.rng.below(3)).unwrap_or(0));
        if self.rng.below(3) == 0 {
            task.run_at = self.clock.now_ms().saturating_add(Duration::from_secs(5));
        }
        task.priority = [0, -1, 5][self.rng.below(3)];
        for _ in 0..self.rng.below(3) {
            if !self.ids.is_empty() {
                let parent = self.pick();
                task.depends_on.push(parent);
            }
        }
        if self.rng.below(2) == 0 {
            task.on_parent_failure = OnParentFailure::IgnoreParentFailure;
        }
        if let Ok(stored) = self.write(|txn| txn.enqueue_batch(&[task])) {
            self.ids.extend(stored.into_iter().map(|t| t.id));
        }
    }

    /// Claims one task, or a batch of up to four (sometimes listing a queue twice), and
    /// compares with a full scan.
    fn claim(&mut self) {
        let mut queues: Vec<&str> =
            QUEUES.iter().copied().filter(|_| self.rng.below(2) == 0).collect();
        if self.rng.below(4) == 0 {
            queues.push(QUEUES[self.rng.below(QUEUES.len())]);
        }
        let max = [1, 1, 2, 4][self.rng.below(4)];
        let expected = {
            let state = self.store.lock().unwrap_or_else(|e| panic!("{e}"));
            state.scan_first(&queues, self.clock.now_ms(), max)
        };
        let got: Vec<String> = match self.write(|txn| txn.claim(&queues, max)) {
            Ok(tasks) => tasks.into_iter().map(|t| t.id).collect(),
            Err(e) => panic!("claim of {max} from {queues:?} failed: {e}"),
        };
        assert_eq!(got, expected, "claim of {max} from {queues:?} vs a scan");
    }

    fn worker_write(&mut self) {
        let Some((id, token)) = self.leased() else { return };
        let now = self.clock.now_ms();
        let _ = match self.rng.below(8) {
            0 => self.write(|txn| txn.ack(&id, &token, Some(b"r".to_vec()))),
            1 => self.write(|txn| txn.fail(&id, &token, &Failure::business("b", now))),
            2 => self.write(|txn| txn.fail(&id, &token, &Failure::throttled("t", now))),
            3 => self.write(|txn| txn.fail(&id, &token, &Failure::skip("s"))),
            4 => self.write(|txn| txn.requeue(&id, &token)),
            5 => self.write(|txn| txn.heartbeat(&id, &token)),
            6 => self.write(|txn| txn.finish_canceled(&id, &token)),
            _ => {
                let step = Step { delay: Duration::from_secs(2), ..Step::default() };
                self.write(|txn| txn.save_step(&id, &token, step))
            }
        };
    }

    fn operator(&mut self) {
        let id = self.pick();
        let _ = match self.rng.below(5) {
            0 => self.write(|txn| txn.cancel(&id)),
            1 => self.write(|txn| txn.resume(&id).map(drop)),
            2 => {
                self.write(|txn| txn.replay(&ReplayRequest::by_id(&id).allow_completed()).map(drop))
            }
            3 => self.write(|txn| txn.reap().map(drop)),
            _ => self.write(|txn| {
                let items = [AckItem { id: id.clone(), token: "stale".into(), result: None }];
                let checks = crate::ops::check_ack_items(&items, &txn.opts.limits);
                txn.ack_many(&items, checks);
                Ok(())
            }),
        };
    }

    fn step(&mut self) {
        match self.rng.below(10) {
            0..=2 => self.enqueue(),
            3 | 4 => self.claim(),
            5 | 6 => self.worker_write(),
            7 => self.operator(),
            8 => self
                .clock
                .advance(Duration::from_secs(u64::try_from(self.rng.below(40)).unwrap_or(0))),
            _ => self.toggle_pause(),
        }
    }

    fn toggle_pause(&mut self) {
        let queue = QUEUES[self.rng.below(3)];
        let mut state = self.store.lock().unwrap_or_else(|e| panic!("{e}"));
        if !state.paused.remove(queue) {
            state.paused.insert(queue.to_owned());
        }
    }

    fn check(&self, step: usize) {
        let state = self.store.lock().unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = state.check() {
            panic!("step {step}: {e}");
        }
    }
}

#[test]
fn indexes_stay_consistent_across_random_operations() {
    for seed in 1..=8u64 {
        let mut w = World::new(seed);
        for step in 0..1_500 {
            w.step();
            w.check(step);
        }
        let before = w.store.lock().map(|s| s.tasks.len()).unwrap_or(0);
        w.clock.advance(Duration::from_secs(3600));
        let far = w.clock.now_ms();
        let request =
            PruneRequest { finished_before: far, include_keyed: true, ..PruneRequest::default() };
        let pruned = {
            let mut state = w.store.lock().unwrap_or_else(|e| panic!("{e}"));
            let rules = crate::prune::Rules {
                before: request.finished_before,
                statuses: taskgate::validate::prune_statuses(&request.statuses).unwrap_or_default(),
                include_keyed: true,
            };
            let mut units = state.prune_units(&rules).into_iter().peekable();
            state.prune_batch(&mut units, &rules, usize::MAX)
        };
        w.check(usize::MAX);
        let after = w.store.lock().map(|s| s.tasks.len()).unwrap_or(0);
        assert_eq!(before - after, pruned, "seed {seed}: prune count");
        assert!(pruned > 0, "seed {seed}: a long run leaves finished tasks to prune");
    }
}

/// Forces a stored task back to `blocked` with its edges not done (a crash mid-propagation).
fn force_blocked(state: &mut State, id: &str) {
    let Some(entry) = state.tasks.get_mut(id) else { panic!("no task {id}") };
    state.index.remove(&entry.key, entry.slot, &entry.task);
    entry.task.status = Status::Blocked;
    entry.task.finished_at = None;
    entry.task.last_error.clear();
    entry.pending_parents = 1;
    entry.parents.iter_mut().for_each(|e| e.done = false);
    state.index.add(&entry.key, entry.slot, &entry.task);
}

#[test]
fn reaper_repairs_tasks_left_blocked() {
    let w = World::new(0);
    let task = |id: &str, parents: &[&str]| {
        Task::new("job", format!("q-{id}")).with_id(id).with_depends_on(parents.iter().copied())
    };
    let tasks = [
        task("p", &[]),
        task("c", &["p"]),
        task("p2", &[]),
        task("c2", &["p2"]),
        task("gc", &["c2"]),
    ];
    assert!(w.write(|txn| txn.enqueue_batch(&tasks)).is_ok());
    for (id, fail) in [("p", false), ("p2", true)] {
        let queue = format!("q-{id}");
        let claimed = w.write(|txn| txn.claim(&[queue.as_str()], 1)).ok().and_then(|mut t| t.pop());
        let token = claimed.map(|t| t.lease_token).unwrap_or_default();
        let done = if fail {
            w.write(|txn| txn.fail(id, &token, &Failure::skip("boom")))
        } else {
            w.write(|txn| txn.ack(id, &token, None))
        };
        assert!(done.is_ok(), "finishing {id}");
    }
    {
        let mut state = w.store.lock().unwrap_or_else(|e| panic!("{e}"));
        ["c", "c2", "gc"].iter().for_each(|id| force_blocked(&mut state, id));
    }
    assert_eq!(w.write(|txn| txn.reap()).ok(), Some(0), "repairs are not counted");
    let state = w.store.lock().unwrap_or_else(|e| panic!("{e}"));
    let view = |id: &str| state.get(id).map(|t| (t.status, t.last_error)).ok();
    assert_eq!(view("c"), Some((Status::Pending, String::new())));
    assert_eq!(view("c2"), Some((Status::Canceled, "parent p2 failed".to_owned())));
    assert_eq!(view("gc"), Some((Status::Canceled, "parent c2 canceled".to_owned())));
    assert_eq!(state.check(), Ok(()));
}

#[test]
fn declares_quota_and_audit_and_nothing_else() {
    let broker = crate::MemoryBroker::new();
    let caps = taskgate::Broker::capabilities(&broker);
    assert_eq!(caps, taskgate::Capabilities::NONE.with_quota(true).with_audit(true));
    assert!(taskgate::Broker::quota_provider(&broker).is_some(), "quota declared, quota given");
}
