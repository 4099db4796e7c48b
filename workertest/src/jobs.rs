//! The job types the scenarios submit, and small shared handler state (call counters and
//! gates a test opens).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use taskgate_worker::Job;
use tokio::sync::Semaphore;

/// Returns its text.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Echo {
    /// What comes back.
    pub text: String,
}

impl Job for Echo {
    const KIND: &'static str = "echo";
    type Output = String;
}

/// A job whose handler each scenario defines; carries a number.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Work {
    /// Any number.
    pub n: u32,
}

impl Job for Work {
    const KIND: &'static str = "work";
    type Output = u32;
}

/// A second kind, for pipelines and fan-in.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stage {
    /// Any number.
    pub n: u32,
}

impl Job for Stage {
    const KIND: &'static str = "stage";
    type Output = u32;
}

/// A periodic job.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tick;

impl Job for Tick {
    const KIND: &'static str = "tick";
    type Output = ();
}

/// A stepwise counter: counts to `to`, one step per run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CountTo {
    /// Where to stop.
    pub to: u32,
}

impl Job for CountTo {
    const KIND: &'static str = "count_to";
    type Output = u32;
}

/// Counts handler calls.
#[derive(Clone, Debug, Default)]
pub struct Calls(Arc<AtomicUsize>);

impl Calls {
    /// Records a call and returns its number (1 for the first).
    pub fn hit(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Calls so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A gate handlers wait on until the test opens it.
#[derive(Clone, Debug)]
pub struct Gate(Arc<Semaphore>);

impl Default for Gate {
    fn default() -> Self {
        Gate(Arc::new(Semaphore::new(0)))
    }
}

impl Gate {
    /// Waits until the gate is open.
    pub async fn pass(&self) {
        if let Ok(permit) = self.0.acquire().await {
            permit.forget();
            self.0.add_permits(1);
        }
    }

    /// Opens the gate for every waiter, now and later.
    pub fn open(&self) {
        self.0.add_permits(1);
    }
}
