#!/usr/bin/env bash
# Runs one backend's tests (its contract suite, model test, history checker and own tests) and
# prints how many contract cases ran and passed. Usage: ci/backend.sh local|postgres|mysql
#   local    — core, memory, SQLite, the engine, brokertest, the CLI, the runtime, the examples
#              and the admin API (no server needed; the admin API's PostgreSQL and MySQL tests
#              skip loudly without URLs)
#   postgres — needs TASKGATE_PG_URL (or Docker for testcontainers)
#   mysql    — needs TASKGATE_MYSQL_URL (or Docker for testcontainers)
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  local) packages=(-p taskgate -p taskgate-memory -p brokertest -p taskgate-sql -p taskgate-sqlite -p taskgate-cli
                  -p taskgate-worker -p taskgate-examples -p taskgate-admin)
         backends=(memory sqlite) ;;
  postgres) packages=(-p taskgate-postgres); backends=(postgres) ;;
  mysql) packages=(-p taskgate-mysql); backends=(mysql) ;;
  *) echo "usage: ci/backend.sh local|postgres|mysql" >&2; exit 2 ;;
esac

export TASKGATE_CASE_REPORT
TASKGATE_CASE_REPORT=$(mktemp -d)/cases
printf '\n==== cargo test %s\n' "${packages[*]}"
status=0
cargo test "${packages[@]}" --locked --no-fail-fast || status=$?
printf '\n==== contract cases and worker scenarios (from %s)\n' "$TASKGATE_CASE_REPORT"
python3 ci/count_cases.py "$TASKGATE_CASE_REPORT" brokertest/src/lib.rs \
  --workers workertest/src/lib.rs "${backends[@]}" \
  || status=1
exit "$status"
