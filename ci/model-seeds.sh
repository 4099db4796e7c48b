#!/usr/bin/env bash
# Runs the model test (extensions §E12) with many random seeds: COUNT seeds on memory and
# SQLite, COUNT/4 (at least 1) on PostgreSQL and MySQL/MariaDB. Not part of the default test
# run (CI runs the model test once per backend, with one random seed); run it before a change
# to the engine, a backend or the model lands. Usage: ci/model-seeds.sh COUNT
#
# Every run prints its seed and the command that replays it; a failing run's report (the
# shrunk sequence) is printed in full. Exits 1 when any run failed. PostgreSQL and MySQL need
# TASKGATE_PG_URL / TASKGATE_MYSQL_URL (`. ci/services.sh` sets both); a missing database
# fails the run (TASKGATE_REQUIRE_DB=1). TASKGATE_MODEL_CASES still sets the cases per run.
set -euo pipefail
cd "$(dirname "$0")/.."

count="${1:-}"
if ! [[ "$count" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: ci/model-seeds.sh COUNT   (COUNT seeds on memory/SQLite, COUNT/4 on servers)" >&2
  exit 2
fi
servers=$(( count / 4 > 0 ? count / 4 : 1 ))
export TASKGATE_REQUIRE_DB="${TASKGATE_REQUIRE_DB:-1}"

# backend  runs  cargo arguments (package, test target, test name: the `model` test that
# `brokertest::contract_tests!` generates in every backend's tests/contract.rs)
plan=(
  "memory   $count   -p taskgate-memory --test contract model"
  "sqlite   $count   -p taskgate-sqlite --test contract model"
  "postgres $servers -p taskgate-postgres --test contract model"
  "mysql    $servers -p taskgate-mysql --test contract model"
)

logs=$(mktemp -d)
printf '==== building the model tests\n'
for line in "${plan[@]}"; do
  read -r _ _ args <<<"$line"
  # shellcheck disable=SC2086 # the arguments are words on purpose
  if ! cargo test --locked --no-run $args >"$logs/build.log" 2>&1; then
    cat "$logs/build.log"
    exit 1
  fi
done
failed=()
summary=()
for line in "${plan[@]}"; do
  read -r backend runs args <<<"$line"
  passed=0
  printf '\n==== %s: %s seeds\n' "$backend" "$runs"
  for ((i = 1; i <= runs; i++)); do
    seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
    rerun="TASKGATE_MODEL_SEED=$seed cargo test $args"
    log="$logs/$backend-$seed.log"
    started=$(date +%s)
    # shellcheck disable=SC2086
    if TASKGATE_MODEL_SEED=$seed cargo test --locked -q $args -- --nocapture >"$log" 2>&1; then
      passed=$((passed + 1))
      printf '  %-8s seed %-20s passed (%d s)\n' "$backend" "$seed" $(($(date +%s) - started))
    else
      failed+=("$backend seed $seed: $rerun")
      printf '  %-8s seed %-20s FAILED (%d s); rerun: %s\n' "$backend" "$seed" \
        $(($(date +%s) - started)) "$rerun"
      # The report: from the panic to the backtrace (or the watchdog's line, or the end).
      sed -n '/panicked at\|still running after/,/^stack backtrace:\|^test result/p' "$log" \
        | grep -v '^stack backtrace:' | sed 's/^/    /'
    fi
  done
  summary+=("$(printf '%-8s %d/%d seeds passed' "$backend" "$passed" "$runs")")
done

printf '\n==== model seeds\n'
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  printf 'failed:\n'
  printf '  %s\n' "${failed[@]}"
  printf 'logs: %s\n' "$logs"
  exit 1
fi
rm -rf "$logs"
