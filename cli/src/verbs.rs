//! The operator verbs, one module per group; each verb is one `async fn(args, format)`.

pub(crate) mod audit;
pub(crate) mod migrate;
pub(crate) mod prune;
pub(crate) mod queues;
pub(crate) mod serve;
pub(crate) mod tasks;
