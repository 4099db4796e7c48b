#!/usr/bin/env bash
# Makes sure the database servers the tests need are running, creates what the tests use, and
# exports the URLs. Source it: `. ci/services.sh`. Works on this Debian machine and any Debian-like
# machine with PostgreSQL and MariaDB installed from packages; a CI job with service containers
# sets the URLs itself and this script only checks they answer.

: "${TASKGATE_PG_URL:=postgres://postgres@127.0.0.1:5432/test}"
: "${TASKGATE_MYSQL_URL:=mysql://root@127.0.0.1:3306/test}"
export TASKGATE_PG_URL TASKGATE_MYSQL_URL
export TASKGATE_REQUIRE_DB=1

ci_log() { printf '[services] %s\n' "$*" >&2; }

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 >/dev/null 2>&1; }
mysql_up() { mariadb-admin --protocol=tcp -h 127.0.0.1 -P 3306 -uroot ping >/dev/null 2>&1 \
  || mysqladmin --protocol=tcp -h 127.0.0.1 -P 3306 -uroot ping >/dev/null 2>&1; }

wait_for() { # name, check function, seconds
  local i
  for ((i = 0; i < $3 * 2; i++)); do
    if "$2"; then ci_log "$1 is up"; return 0; fi
    sleep 0.5
  done
  ci_log "$1 did not come up within $3 s"; return 1
}

start_pg() {
  if pg_up; then ci_log "PostgreSQL is up"; return 0; fi
  ci_log "starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    local ver; ver=$(ls /etc/postgresql | sort -V | tail -n 1)
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  fi
  wait_for PostgreSQL pg_up 60
}

start_mysql() {
  if mysql_up; then ci_log "MariaDB/MySQL is up"; return 0; fi
  ci_log "starting MariaDB"
  if [ -x /usr/sbin/mariadbd ]; then
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
  fi
  wait_for MariaDB mysql_up 60
}

ensure_databases() {
  # The tests use the `test` database on both servers; each test makes its own tables under a
  # random prefix and drops them afterwards.
  if command -v psql >/dev/null 2>&1; then
    psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" \
      | grep -q 1 || psql -h 127.0.0.1 -U postgres -d postgres -c 'CREATE DATABASE test' >/dev/null
  fi
  if command -v mariadb >/dev/null 2>&1; then
    mariadb --protocol=tcp -h 127.0.0.1 -uroot -e 'CREATE DATABASE IF NOT EXISTS test' \
      || ci_log "could not create the MariaDB test database"
  fi
}

start_pg && start_mysql && ensure_databases
# PgBouncer (transaction pooling) in front of PostgreSQL: exports TASKGATE_PGBOUNCER_URL.
. "$(dirname "${BASH_SOURCE[0]}")/pgbouncer.sh"
ci_log "TASKGATE_PG_URL=$TASKGATE_PG_URL TASKGATE_MYSQL_URL=$TASKGATE_MYSQL_URL TASKGATE_REQUIRE_DB=1"
# The failover test builds its own PostgreSQL primary + standby pairs: check for the binaries.
. ci/pg-standby.sh
# The 3-node MariaDB Galera cluster (ports 3307–3309) for the cross-node contract run and the
# node-kill test (brokers/mysql/tests/galera.rs, galera_nodekill.rs; issue 39): started by default
# and exported as TASKGATE_GALERA_URLS; a cluster that does not come up fails those tests
# (TASKGATE_REQUIRE_DB=1). TASKGATE_GALERA=0 opts out: the cluster is not started, the Galera tests
# skip loudly instead of failing, and ci/test.sh does not count the mysql-galera suite.
if [ "${TASKGATE_GALERA:-1}" = 0 ]; then
  ci_log "TASKGATE_GALERA=0: the Galera cluster is not started (its tests skip)"
  unset TASKGATE_GALERA_URLS
else
  . "$(dirname "${BASH_SOURCE[0]}")/galera.sh"
fi
export TASKGATE_GALERA="${TASKGATE_GALERA:-1}"
