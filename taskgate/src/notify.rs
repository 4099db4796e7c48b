//! Delivery of state-change snapshots to the `notify` observer (contract §3.5): after the
//! write committed, outside every lock, on another task, each call guarded against panics.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::Task;

/// The observer's type: called once per snapshot.
pub type NotifyFn = Arc<dyn Fn(&Task) + Send + Sync>;

/// Publishes snapshots to an optional observer.
#[derive(Clone, Default)]
pub struct Notifier {
    callback: Option<NotifyFn>,
}

impl Notifier {
    /// A notifier for `callback` (none: publishing does nothing).
    pub fn new(callback: Option<NotifyFn>) -> Self {
        Notifier { callback }
    }

    /// True when an observer is installed (backends may skip building snapshots otherwise).
    pub fn is_active(&self) -> bool {
        self.callback.is_some()
    }

    /// Hands `snapshots` to the observer, in order, on a spawned task (or thread when no tokio
    /// runtime is running). Call it only after the write committed. A panicking call affects
    /// neither the operation nor the following snapshots.
    pub fn publish(&self, snapshots: Vec<Task>) {
        let Some(callback) = self.callback.clone() else { return };
        if snapshots.is_empty() {
            return;
        }
        let deliver = move || {
            for snapshot in &snapshots {
                let _ = catch_unwind(AssertUnwindSafe(|| callback(snapshot)));
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move { deliver() });
            }
            Err(_) => {
                std::thread::spawn(deliver);
            }
        }
    }
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier").field("active", &self.is_active()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    #[tokio::test]
    async fn panicking_observer_still_sees_every_snapshot() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let notifier = Notifier::new(Some(Arc::new(move |t: &Task| {
            sink.lock().unwrap().push(t.id.clone());
            panic!("observer panics on purpose");
        })));
        let task = |id: &str| Task::new("t", "q").with_id(id);
        notifier.publish(vec![task("a"), task("b")]);
        for _ in 0..500 {
            if seen.lock().unwrap().len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(*seen.lock().unwrap(), vec!["a".to_owned(), "b".to_owned()]);
    }
}
