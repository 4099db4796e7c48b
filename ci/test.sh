#!/usr/bin/env bash
# The test command (README "Test"): formatting, lints, docs, the workflow file, every crate's
# tests on every backend (the examples run to completion as tests), brokertest's own suite on
# PostgreSQL (BROKERTEST_URL), the memory and SQLite suites
# again under a CPU hog (ci/under-load.sh), each benchmark once, and a
# per-backend count of the contract cases, model/history/regression runs and worker scenarios
# that ran and passed, read from the case report the generated tests write
# (TASKGATE_CASE_REPORT; the run fails if any backend ran fewer than the full lists).
# Databases: run `. ci/services.sh` first (`.ci/run` does), or set TASKGATE_PG_URL /
# TASKGATE_MYSQL_URL yourself; without them the PostgreSQL and MySQL cases skip loudly (and
# fail with TASKGATE_REQUIRE_DB=1).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==== %s\n' "$*"; }
started=$(date +%s)

ci/lint.sh

logs=$(mktemp -d)
export TASKGATE_CASE_REPORT="$logs/cases"
step "cargo test --workspace (every crate, every backend)"
status=0
cargo test --workspace --locked --no-fail-fast || status=$?

step "cargo test -p brokertest on PostgreSQL (BROKERTEST_URL; the workspace run above used memory)"
# The same test binary (`--workspace`: no rebuild); outside the case report, which counts each
# backend's own targets.
env -u TASKGATE_CASE_REPORT BROKERTEST_URL="$TASKGATE_PG_URL" \
  cargo test --workspace --locked --test suite || status=1

step "memory and SQLite suites again under a CPU hog (2x the cores busy)"
ci/under-load.sh || status=1

step "cargo bench -- --test (each benchmark once)"
ci/bench-smoke.sh || status=1

step "contract cases and worker scenarios per backend (from $TASKGATE_CASE_REPORT)"
# The Galera suite counts unless the cluster was opted out (TASKGATE_GALERA=0, ci/services.sh).
galera=(mysql-galera=galera)
[ "${TASKGATE_GALERA:-1}" = 0 ] && galera=()
python3 ci/count_cases.py "$TASKGATE_CASE_REPORT" brokertest/src/lib.rs \
  --workers workertest/src/lib.rs \
  memory sqlite postgres mysql postgres-pgbouncer=pgbouncer "${galera[@]}" || status=1

step "done in $(( $(date +%s) - started )) s (status $status)"
exit "$status"
