//! taskgate's runnable examples (this library is empty; the examples are the point):
//!
//! - `cargo run --example worker` — a worker service on a SQLite file: a typed job, 4
//!   workers, a fan-in, a retry and Ctrl-C (`examples/worker.rs`, README "Quick start");
//! - `cargo run --example quickstart` — the broker by hand: enqueue, claim, ack
//!   (`examples/quickstart.rs`).
//!
//! The package depends on what the examples use and nothing else, so running one compiles
//! no CLI, test kit or container client.
