//! The periodic quota (contract §9.5, memory form): under the store's mutex, `key → window →
//! used`, windows older than `win − 2·period` dropped on each reserve; time from the handle's
//! clock (the injected one, else the system clock).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use taskgate::{window_start, QuotaGate, Reservation, Result};

use crate::state::State;
use crate::Handle;

/// A gate on one budget key of a memory store.
pub(crate) struct MemoryQuotaGate {
    /// The handle it was made from (lifecycle, clock, store).
    pub(crate) handle: Arc<Handle>,
    /// The budget key.
    pub(crate) key: String,
    /// Window length in seconds.
    pub(crate) period: i64,
    /// Starts allowed per window.
    pub(crate) limit: u32,
}

impl fmt::Debug for MemoryQuotaGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryQuotaGate")
            .field("key", &self.key)
            .field("period", &self.period)
            .field("limit", &self.limit)
            .finish()
    }
}

#[async_trait]
impl QuotaGate for MemoryQuotaGate {
    async fn reserve(&self) -> Result<Option<Reservation>> {
        let opts = self.handle.life.options()?;
        let now = opts.clock.now_ms().as_secs();
        let mut state = self.handle.store.lock()?;
        Ok(state.reserve(&self.key, self.period, self.limit, now))
    }

    async fn release(&self, reservation: Reservation) -> Result<()> {
        self.handle.life.options()?;
        let mut state = self.handle.store.lock()?;
        if let Some(used) =
            state.quota.get_mut(&self.key).and_then(|w| w.used.get_mut(&reservation.window))
        {
            *used = used.saturating_sub(1);
        }
        Ok(())
    }
}

impl State {
    /// Reserves one unit of `key`'s current window, or `None` when it is exhausted.
    fn reserve(&mut self, key: &str, period: i64, limit: u32, now: i64) -> Option<Reservation> {
        let win = window_start(now, period);
        let windows = self.quota.entry(key.to_owned()).or_default();
        windows.period = period;
        let oldest = win.saturating_sub(period.saturating_mul(2));
        windows.used.retain(|w, _| *w >= oldest);
        let used = windows.used.entry(win).or_insert(0);
        if *used >= limit {
            return None;
        }
        *used += 1;
        Some(Reservation { window: win })
    }
}
