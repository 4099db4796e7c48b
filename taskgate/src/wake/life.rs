//! A broker handle's lifecycle: not initialised, ready, or closed.

use tokio::sync::watch;

use crate::{Error, Result};

#[cfg(doc)]
use super::wait_for_work;

/// A broker handle's lifecycle: not initialised, ready with resolved options, or closed.
/// Closing it ends every [`wait_for_work`] loop that runs under it.
#[derive(Debug)]
pub struct Lifecycle {
    state: std::sync::RwLock<LifeState>,
    closed_tx: watch::Sender<bool>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle { state: std::sync::RwLock::default(), closed_tx: watch::Sender::new(false) }
    }
}

#[derive(Debug, Default)]
enum LifeState {
    #[default]
    New,
    Ready(std::sync::Arc<crate::ResolvedOptions>),
    Closed,
}

impl Lifecycle {
    /// A lifecycle in the "not initialised" state.
    pub fn new() -> Self {
        Lifecycle::default()
    }

    /// Installs (or refreshes) the options; fails with `Closed` after close.
    pub fn init(&self, options: crate::ResolvedOptions) -> Result<()> {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, LifeState::Closed) {
            return Err(Error::Closed);
        }
        *state = LifeState::Ready(std::sync::Arc::new(options));
        Ok(())
    }

    /// The options, or `NotInitialized` / `Closed`.
    pub fn options(&self) -> Result<std::sync::Arc<crate::ResolvedOptions>> {
        match &*self.state.read().unwrap_or_else(|p| p.into_inner()) {
            LifeState::New => Err(Error::NotInitialized),
            LifeState::Ready(options) => Ok(options.clone()),
            LifeState::Closed => Err(Error::Closed),
        }
    }

    /// Moves to closed and wakes waiting loops; returns false when it already was closed.
    pub fn close(&self) -> bool {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        let was_open =
            !matches!(std::mem::replace(&mut *state, LifeState::Closed), LifeState::Closed);
        drop(state);
        self.closed_tx.send_replace(true);
        was_open
    }

    /// A receiver that sees the close (`true`) as a change.
    pub(super) fn closed_receiver(&self) -> watch::Receiver<bool> {
        self.closed_tx.subscribe()
    }

    /// True after [`Lifecycle::close`].
    pub fn is_closed(&self) -> bool {
        *self.closed_tx.borrow()
    }
}
