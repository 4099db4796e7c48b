#!/usr/bin/env bash
# The test command (README "Test"): formatting, lints, every crate's tests on every backend,
# docs with warnings denied, and a per-backend count of contract cases that ran and passed.
# Databases: run `. ci/services.sh` first (`.ci/run` does), or set TASKGATE_PG_URL /
# TASKGATE_MYSQL_URL yourself; without them the PostgreSQL and MySQL cases skip loudly.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==== %s\n' "$*"; }
logs=$(mktemp -d)

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (every crate, every backend)"
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$logs/test.log"

step "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

step "contract cases per backend"
# Map every test executable to its package, then count, per backend, the contract cases that
# passed in the binaries that run the suite (brokertest/tests/<backend>.rs and
# brokers/<backend>/tests/contract.rs).
cargo test --workspace --locked --no-run --message-format=json 2>/dev/null > "$logs/build.json"
python3 ci/count_cases.py "$logs/build.json" "$logs/test.log" brokertest/src/lib.rs
