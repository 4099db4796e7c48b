#!/usr/bin/env bash
# A PostgreSQL primary and a streaming standby of their own, for the failover test
# (brokers/postgres/tests/failover.rs, docs/scaling.md "PostgreSQL standby and failover").
#
# The failover test destroys its topology on purpose (it kills the primary and promotes the
# standby), so it does not share a long-lived pair: every run builds a fresh pair in a
# directory of its own on ports it chose, and removes it afterwards. A pair left behind by a
# killed run is removed by the next run (`sweep`). Sourced by ci/services.sh, this script only
# checks that the server binaries are there and exports TASKGATE_PG_BINDIR.
#
#   ci/pg-standby.sh pair DIR PRIMARY_PORT STANDBY_PORT sync|async
#       initdb DIR/primary (trust, replication allowed from 127.0.0.1), start it, set
#       synchronous_standby_names = 'tg_standby' (sync) or '' (async), pg_basebackup -R into
#       DIR/standby, start the standby as `tg_standby`, and wait until it streams (and, for
#       sync, until the primary reports it `sync`). DIR must not exist.
#   ci/pg-standby.sh kill DATADIR       pg_ctl stop -m immediate (no-op when it is not running)
#   ci/pg-standby.sh promote DATADIR    pg_ctl promote -w
#   ci/pg-standby.sh remove DIR         stops both servers of a pair and deletes DIR
#   ci/pg-standby.sh sweep ROOT         removes the pairs under ROOT whose owner process is gone
#   ci/pg-standby.sh bindir             prints the server binaries' directory, or fails
#
# initdb and pg_ctl refuse to run as root: as root, they run as the `postgres` user.

pg_ha_bindir() {
  local dir
  if [ -n "${TASKGATE_PG_BINDIR:-}" ] && [ -x "$TASKGATE_PG_BINDIR/pg_ctl" ]; then
    printf '%s\n' "$TASKGATE_PG_BINDIR"; return 0
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/pg_basebackup" ]; then
      printf '%s\n' "$dir"; return 0
    fi
  done
  dir=$(pg_config --bindir 2>/dev/null) || true
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_basebackup" ]; then
    printf '%s\n' "$dir"; return 0
  fi
  return 1
}

# Sourced (ci/services.sh): only the check and the export.
if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  if TASKGATE_PG_BINDIR=$(pg_ha_bindir); then
    export TASKGATE_PG_BINDIR
    printf '[services] PostgreSQL server binaries for the failover test: %s\n' \
      "$TASKGATE_PG_BINDIR" >&2
  else
    unset TASKGATE_PG_BINDIR
    printf '[services] no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup): %s\n' \
      "the failover test will fail under TASKGATE_REQUIRE_DB=1" >&2
  fi
  return 0
fi

set -euo pipefail

log() { printf '[pg-standby] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

BIN=$(pg_ha_bindir) || die "no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) found"

# Runs a server binary as the user that owns the data (postgres when we are root).
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

psql_at() { # port, SQL
  as_pg "$BIN/psql" -X -q -h 127.0.0.1 -p "$1" -U postgres -d postgres -tAc "$2"
}

# Server settings both servers start with: loopback only, the socket in the pair's directory,
# small memory, quick shutdown of the walsender on a kill.
server_opts() { # port, socket dir, cluster name
  printf -- '-c port=%s -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s ' "$1" "$2"
  printf -- '-c cluster_name=%s -c shared_buffers=16MB -c max_connections=60 ' "$3"
  printf -- '-c wal_level=replica -c max_wal_senders=4 -c hot_standby=on '
  printf -- '-c wal_receiver_status_interval=1s -c logging_collector=off'
}

start_server() { # datadir, port, socket dir, cluster name
  as_pg "$BIN/pg_ctl" -D "$1" -l "$1.log" -w -t 60 -o "$(server_opts "$2" "$3" "$4")" start \
    >/dev/null || { tail -n 20 "$1.log" >&2; die "could not start $1"; }
}

wait_streaming() { # primary port, sync|async
  local want=async i state
  [ "$2" = sync ] && want=sync
  for ((i = 0; i < 120; i++)); do
    state=$(psql_at "$1" "SELECT state || ' ' || sync_state FROM pg_stat_replication \
      WHERE application_name = 'tg_standby'" 2>/dev/null || true)
    if [ "$state" = "streaming $want" ]; then return 0; fi
    sleep 0.25
  done
  die "the standby does not stream ($want) to the primary on port $1 (state: '${state:-none}')"
}

make_pair() { # dir, primary port, standby port, sync|async
  local dir=$1 pport=$2 sport=$3 mode=$4 names=''
  case "$mode" in sync) names=tg_standby ;; async) ;; *) die "mode must be sync or async" ;; esac
  [ -e "$dir" ] && die "$dir exists"
  mkdir -p "$dir"
  printf '%s\n' "${PPID}" >"$dir/owner"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  as_pg "$BIN/initdb" -D "$dir/primary" -U postgres -A trust --no-sync >/dev/null \
    || die "initdb failed"
  # Replication connections from loopback are trusted (initdb's default pg_hba.conf has the
  # `host replication all 127.0.0.1/32 trust` line; written again so no default is assumed).
  printf 'host replication all 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 trust\n' \
    | as_pg tee -a "$dir/primary/pg_hba.conf" >/dev/null
  start_server "$dir/primary" "$pport" "$dir" tg_primary
  # In postgresql.auto.conf, so the standby inherits it through the base backup, as a standby
  # built from a production primary does (and its promotion must clear it).
  psql_at "$pport" "ALTER SYSTEM SET synchronous_standby_names = '$names'" >/dev/null
  psql_at "$pport" "SELECT pg_reload_conf()" >/dev/null
  as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$dir/standby" -R \
    -X stream -c fast >/dev/null || die "pg_basebackup failed"
  start_server "$dir/standby" "$sport" "$dir" tg_standby
  wait_streaming "$pport" "$mode"
  [ "$(psql_at "$sport" 'SELECT pg_is_in_recovery()')" = t ] || die "the standby is not in recovery"
  log "pair in $dir: primary 127.0.0.1:$pport, standby 127.0.0.1:$sport ($mode)"
}

kill_server() { # datadir
  if as_pg "$BIN/pg_ctl" -D "$1" status >/dev/null 2>&1; then
    as_pg "$BIN/pg_ctl" -D "$1" -m immediate -w -t 60 stop >/dev/null
  fi
}

remove_pair() { # dir
  local dir=$1
  [ -f "$dir/owner" ] || die "$dir holds no pair (no owner file)"
  kill_server "$dir/primary" || true
  kill_server "$dir/standby" || true
  rm -rf "$dir"
}

sweep() { # root: pairs whose owner process is gone
  local d owner
  for d in "$1"/*/; do
    [ -f "$d/owner" ] || continue
    owner=$(cat "$d/owner")
    if ! kill -0 "$owner" 2>/dev/null; then
      log "removing the pair $d left by process $owner"
      remove_pair "${d%/}"
    fi
  done
}

case "${1:-}" in
  pair) [ $# = 5 ] || die "usage: $0 pair DIR PRIMARY_PORT STANDBY_PORT sync|async"
    make_pair "$2" "$3" "$4" "$5" ;;
  kill) kill_server "$2" ;;
  promote) as_pg "$BIN/pg_ctl" -D "$2" -w -t 60 promote >/dev/null ;;
  remove) remove_pair "$2" ;;
  sweep) sweep "$2" ;;
  bindir) printf '%s\n' "$BIN" ;;
  *) die "usage: $0 pair|kill|promote|remove|sweep|bindir …" ;;
esac
