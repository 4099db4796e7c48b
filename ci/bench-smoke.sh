#!/usr/bin/env bash
# Runs every criterion benchmark once (`--test`), so benches never rot, then the report's
# topology rows once on a tiny matrix (issue 39: PostgreSQL through PgBouncer, MariaDB on the
# Galera nodes; about a minute). PostgreSQL and MySQL benches run when their URLs are set and say
# they skip otherwise; the PgBouncer and Galera rows run when `. ci/services.sh` started them
# (TASKGATE_PGBOUNCER_URL, TASKGATE_GALERA_URLS) and are skipped with a loud message where they
# are absent (the GitHub workflow: no PgBouncer, TASKGATE_GALERA=0). A row that runs and fails
# fails the smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p benches --locked -- --test
# `cargo bench` has just built the report binary (benches get their package's binaries) with
# the bench profile, which is release's: run that one rather than `cargo run --release`, whose
# feature set (no dev-dependencies) could rebuild shared crates.
target=$(cargo metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
if [ -x "$target/release/report" ]; then
  "$target/release/report" --topology-only --quick
else
  cargo run -p benches --release --locked --bin report -- --topology-only --quick
fi
