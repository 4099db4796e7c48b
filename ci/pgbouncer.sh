#!/usr/bin/env bash
# PgBouncer in transaction mode in front of the PostgreSQL test server, for the contract and
# worker suites through a transaction pooler (brokers/postgres/tests/pgbouncer.rs). Sourced by
# ci/services.sh once PostgreSQL is up; idempotent: a PgBouncer of ours that answers is
# reused. Installs the Debian package when it is missing. Exports
#   TASKGATE_PGBOUNCER_URL=postgres://postgres@127.0.0.1:<port>/test?pooler=transaction&listen_url=<direct URL>
#
# The port is 6432 unless something that is not ours listens there (the Debian package may
# start its own instance there on a fresh machine; it is left alone), then the next free one
# up to 6449. Config, pid file and log live in TASKGATE_PGBOUNCER_DIR (default
# /tmp/taskgate-pgbouncer, outside the clone: PgBouncer refuses to run as root, and the
# `postgres` user it runs as cannot enter /root).

pgb_log() { printf '[pgbouncer] %s\n' "$*" >&2; }

pgb_dir="${TASKGATE_PGBOUNCER_DIR:-/tmp/taskgate-pgbouncer}"
pgb_direct="${TASKGATE_PG_URL:-postgres://postgres@127.0.0.1:5432/test}"

pgb_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pgb_answers() { # port
  [ "$(psql -h 127.0.0.1 -p "$1" -U postgres -d test -tAc 'SELECT 1' 2>/dev/null)" = 1 ]
}

pgb_pid() { # our running PgBouncer's pid, if any
  local pid
  pid=$(cat "$pgb_dir/pgbouncer.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

pgb_bin() {
  command -v pgbouncer 2>/dev/null || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; }
}

pgb_install() {
  [ -n "$(pgb_bin)" ] && return 0
  pgb_log "installing pgbouncer"
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null 2>&1 \
      || { apt-get update >/dev/null 2>&1 \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null 2>&1; }
  else
    sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null 2>&1
  fi
  [ -n "$(pgb_bin)" ] || { pgb_log "could not install pgbouncer"; return 1; }
}

pgb_max_connections() {
  psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -tAc 'SHOW max_connections' 2>/dev/null
}

pgb_write_config() { # port
  local max pool
  max=$(pgb_max_connections); max=${max:-100}
  # The server's max_connections is shared with the other suites and users of the machine:
  # PgBouncer takes at most a fifth of it (the clients queue in PgBouncer beyond that).
  pool=$(( max / 5 )); [ "$pool" -ge 5 ] || pool=5; [ "$pool" -le 40 ] || pool=40
  cat >"$pgb_dir/pgbouncer.ini" <<EOF
; Written by ci/pgbouncer.sh; rewritten on every start.
[databases]
test = host=127.0.0.1 port=5432 dbname=test

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $1
unix_socket_dir =
pidfile = $pgb_dir/pgbouncer.pid
logfile = $pgb_dir/pgbouncer.log
; The test server trusts loopback connections; PgBouncer connects as the client's user.
auth_type = trust
auth_file = $pgb_dir/userlist.txt
pool_mode = transaction
; Clients queue here; at most default_pool_size + reserve_pool_size server connections.
max_client_conn = 900
default_pool_size = $pool
reserve_pool_size = 2
reserve_pool_timeout = 3
max_db_connections = $(( pool + 2 ))
; sqlx sends extra_float_digits at startup unless told not to (taskgate's pooler mode does not).
ignore_startup_parameters = extra_float_digits
server_idle_timeout = 60
log_connections = 0
log_disconnections = 0
; The console (psql -p <port> -U postgres pgbouncer: SHOW POOLS, SHOW CLIENTS) for looking in.
admin_users = postgres
EOF
  printf '"postgres" ""\n"root" ""\n' >"$pgb_dir/userlist.txt"
}

pgb_start() {
  local pid port
  if pid=$(pgb_pid); then
    port=$(cat "$pgb_dir/port" 2>/dev/null)
    if [ -n "$port" ] && pgb_answers "$port"; then
      pgb_log "PgBouncer (pid $pid) is up on 127.0.0.1:$port"
      pgb_port=$port
      return 0
    fi
    pgb_log "our PgBouncer (pid $pid) does not answer: stopping it"
    kill "$pid" 2>/dev/null; sleep 1; kill -9 "$pid" 2>/dev/null
  fi
  pgb_install || return 1
  for port in $(seq 6432 6449); do
    pgb_listening "$port" || break
    pgb_log "127.0.0.1:$port is taken by something that is not ours"
    port=
  done
  [ -n "$port" ] || { pgb_log "no free port in 6432-6449"; return 1; }
  mkdir -p "$pgb_dir"
  pgb_write_config "$port"
  echo "$port" >"$pgb_dir/port"
  rm -f "$pgb_dir/pgbouncer.pid"
  if [ "$(id -u)" = 0 ]; then
    chown -R postgres: "$pgb_dir"
    chmod 700 "$pgb_dir"
    runuser -u postgres -- "$(pgb_bin)" -d "$pgb_dir/pgbouncer.ini" || return 1
  else
    "$(pgb_bin)" -d "$pgb_dir/pgbouncer.ini" || return 1
  fi
  local i
  for ((i = 0; i < 60; i++)); do
    if pgb_answers "$port"; then
      pgb_log "PgBouncer is up on 127.0.0.1:$port (transaction pooling, log $pgb_dir/pgbouncer.log)"
      pgb_port=$port
      return 0
    fi
    sleep 0.5
  done
  pgb_log "PgBouncer did not come up on 127.0.0.1:$port; its log:"
  tail -n 20 "$pgb_dir/pgbouncer.log" >&2 2>/dev/null
  return 1
}

if pgb_start; then
  pgb_listen=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' \
    "$pgb_direct")
  export TASKGATE_PGBOUNCER_URL="postgres://postgres@127.0.0.1:$pgb_port/test?pooler=transaction&listen_url=$pgb_listen"
  pgb_log "TASKGATE_PGBOUNCER_URL=$TASKGATE_PGBOUNCER_URL"
else
  pgb_log "PgBouncer is not available: the tests through it will fail (TASKGATE_REQUIRE_DB=1)"
fi
