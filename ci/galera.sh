#!/usr/bin/env bash
# A 3-node MariaDB Galera cluster on loopback for the cross-node contract run and the node-kill
# test (issue 39): sourced by ci/services.sh (unless TASKGATE_GALERA=0), or run on its own
# (`bash ci/galera.sh`; `bash ci/galera.sh stop` stops it; `bash ci/galera.sh kill N` SIGKILLs node N).
# Idempotent: a whole cluster is left alone; nodes that are down are restarted and join the rest
# (IST, or SST by rsync); with every node down the most advanced one is bootstrapped
# (`--wsrep-new-cluster`, `safe_to_bootstrap` fixed after an unclean stop); a lone survivor that
# lost quorum is made primary again. Exports TASKGATE_GALERA_URLS (node 1, 2, 3).
#
# Node N (1–3): client port 3306+N, gcomm 24560+N, IST 24570+N, SST 24580+N, state in
# $TASKGATE_GALERA_DIR/nodeN (default /var/lib/taskgate-galera: outside the clone, reachable by the
# mysql user, which $HOME under /root is not). The single server on 3306 is never touched.

galera_dir=${TASKGATE_GALERA_DIR:-/var/lib/taskgate-galera}
galera_log() { printf '[galera] %s\n' "$*" >&2; }
galera_port() { echo $((3306 + $1)); }
galera_sock() { echo "$galera_dir/node$1/mysqld.sock"; }

# Root over the node's own socket (unix_socket authentication as the OS root).
galera_sql() { # node, statement
  mariadb --no-defaults -S "$(galera_sock "$1")" -uroot -N -B -e "$2" 2>/dev/null
}
galera_status() { # node, status variable
  galera_sql "$1" "SHOW GLOBAL STATUS LIKE '$2'" | awk '{print $2}'
}
galera_alive() { mariadb-admin --no-defaults -S "$(galera_sock "$1")" -uroot ping >/dev/null 2>&1; }
galera_synced() { [ "$(galera_status "$1" wsrep_local_state_comment)" = Synced ]; }
galera_primary() { [ "$(galera_status "$1" wsrep_cluster_status)" = Primary ]; }
galera_pid() { cat "$galera_dir/node$1/mysqld.pid" 2>/dev/null || true; }
galera_running() { local p; p=$(galera_pid "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

galera_packages() {
  local need=()
  [ -f /usr/lib/galera/libgalera_smm.so ] || need+=(galera-4)
  command -v rsync >/dev/null 2>&1 || need+=(rsync)
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
  command -v ss >/dev/null 2>&1 || command -v lsof >/dev/null 2>&1 || need+=(iproute2)
  [ ${#need[@]} -eq 0 ] && return 0
  galera_log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; }
}

galera_config() { # node
  local n=$1 d="$galera_dir/node$1" peers
  peers="gcomm://127.0.0.1:24561,127.0.0.1:24562,127.0.0.1:24563"
  mkdir -p "$d"
  cat >"$d/my.cnf" <<EOF
[mysqld]
user=mysql
datadir=$d/data
socket=$d/mysqld.sock
pid-file=$d/mysqld.pid
log-error=$d/error.log
port=$(galera_port "$n")
bind-address=127.0.0.1
skip-name-resolve
performance_schema=OFF
max_connections=400
default_storage_engine=InnoDB
binlog_format=ROW
binlog_row_image=MINIMAL
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=64M
innodb_log_file_size=48M
innodb_flush_log_at_trx_commit=2
wsrep_on=ON
wsrep_provider=/usr/lib/galera/libgalera_smm.so
wsrep_cluster_name=taskgate
wsrep_cluster_address=$peers
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1
wsrep_node_incoming_address=127.0.0.1:$(galera_port "$n")
wsrep_provider_options="base_port=$((24560 + n));gmcast.listen_addr=tcp://127.0.0.1:$((24560 + n));ist.recv_addr=127.0.0.1:$((24570 + n));gcache.size=256M"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$((24580 + n))
wsrep_slave_threads=2
EOF
  if [ ! -d "$d/data/mysql" ]; then
    galera_log "node$n: initialising $d/data"
    mariadb-install-db --no-defaults --datadir="$d/data" --user=mysql --skip-test-db \
      >"$d/install.log" 2>&1 || { galera_log "node$n: mariadb-install-db failed (see $d/install.log)"; return 1; }
  fi
  chown -R mysql:mysql "$d"
}

galera_start() { # node, extra options
  local n=$1
  shift
  galera_log "node$n: starting $*"
  setsid /usr/sbin/mariadbd --defaults-file="$galera_dir/node$n/my.cnf" "$@" \
    </dev/null >>"$galera_dir/node$n/stdout.log" 2>&1 &
}

galera_wait() { # node, check, seconds
  local i
  for ((i = 0; i < $3 * 2; i++)); do
    "$2" "$1" && return 0
    sleep 0.5
  done
  galera_log "node$1: not $2 after $3 s (see $galera_dir/node$1/error.log)"
  return 1
}

galera_ready() { galera_alive "$1" && galera_synced "$1" && galera_primary "$1"; }

# The seqno a stopped node last committed (-1 after an unclean stop: recovered from InnoDB).
galera_seqno() {
  local n=$1 d="$galera_dir/node$1" s
  s=$(awk '/^seqno:/{print $2}' "$d/data/grastate.dat" 2>/dev/null)
  if [ "${s:--1}" = -1 ] && [ -d "$d/data/mysql" ]; then
    s=$(/usr/sbin/mariadbd --defaults-file="$d/my.cnf" --wsrep-recover --log-error="$d/recover.log" \
      >/dev/null 2>&1; sed -n 's/.*Recovered position: [^:]*:\(-\?[0-9]*\).*/\1/p' "$d/recover.log" | tail -n 1)
  fi
  echo "${s:--1}"
}

galera_bootstrap() {
  local n best=1 best_seqno=-2 s
  for n in 1 2 3; do
    s=$(galera_seqno "$n")
    if [ "$s" -gt "$best_seqno" ]; then best=$n; best_seqno=$s; fi
  done
  galera_log "no node is up: bootstrapping node$best (seqno $best_seqno)"
  local g="$galera_dir/node$best/data/grastate.dat"
  [ -f "$g" ] && sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$g"
  galera_start "$best" --wsrep-new-cluster
  galera_wait "$best" galera_ready 120
}

# Some node is alive: make sure one is primary (a survivor that lost quorum is not).
galera_primary_somewhere() {
  local n
  for n in 1 2 3; do galera_alive "$n" && galera_primary "$n" && return 0; done
  for n in 1 2 3; do
    if galera_alive "$n"; then
      galera_log "node$n: no primary component: pc.bootstrap"
      galera_sql "$n" "SET GLOBAL wsrep_provider_options='pc.bootstrap=YES'" || true
      galera_wait "$n" galera_primary 30
      return
    fi
  done
  return 1
}

galera_accounts() { # node: root over TCP with an empty password, and the test database
  galera_sql "$1" "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
    CREATE DATABASE IF NOT EXISTS test"
}

galera_up() {
  local n any=0
  galera_packages || return 1
  mkdir -p "$galera_dir"
  for n in 1 2 3; do galera_config "$n" || return 1; done
  # A node still starting (its process alive, not answering yet) gets a moment first.
  for n in 1 2 3; do
    if galera_running "$n" && ! galera_alive "$n"; then galera_wait "$n" galera_alive 60 || true; fi
    galera_alive "$n" && any=1
  done
  if [ "$any" = 1 ]; then galera_primary_somewhere || return 1; else galera_bootstrap || return 1; fi
  for n in 1 2 3; do
    if ! galera_alive "$n"; then
      galera_running "$n" && { galera_log "node$n: hung, killing"; kill -9 "$(galera_pid "$n")"; sleep 1; }
      galera_start "$n"
    fi
    galera_wait "$n" galera_ready 180 || return 1
  done
  for n in 1 2 3; do
    [ "$(galera_status "$n" wsrep_cluster_size)" = 3 ] || { galera_wait "$n" galera_whole 60 || return 1; }
  done
  galera_accounts 1 || { galera_log "could not create the accounts"; return 1; }
  TASKGATE_GALERA_URLS="mysql://root@127.0.0.1:3307/test,mysql://root@127.0.0.1:3308/test,mysql://root@127.0.0.1:3309/test"
  export TASKGATE_GALERA_URLS
  galera_log "3 nodes Synced: TASKGATE_GALERA_URLS=$TASKGATE_GALERA_URLS"
}
galera_whole() { [ "$(galera_status "$1" wsrep_cluster_size)" = 3 ] && galera_synced "$1"; }

galera_stop() {
  local n
  for n in 3 2 1; do
    galera_alive "$n" && mariadb-admin --no-defaults -S "$(galera_sock "$n")" -uroot shutdown || true
  done
}

# SIGKILL of node N's server (the node-fault test, brokers/mysql/tests/galera_nodekill.rs): no
# shutdown, no goodbye to the cluster; `up` brings it back (IST from a survivor's gcache).
galera_kill() { # node
  local p
  p=$(galera_pid "$1")
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null || { galera_log "node$1: not running"; return 1; }
  kill -9 "$p"
  while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
  galera_log "node$1: killed (pid $p)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-up}" in
    up) galera_up ;;
    stop) galera_stop ;;
    kill) galera_kill "${2:?node}" ;;
    *) echo "usage: ci/galera.sh [up|stop|kill N]" >&2; exit 2 ;;
  esac
else
  # Sourced (ci/services.sh): a cluster that does not come up leaves TASKGATE_GALERA_URLS unset,
  # and the Galera tests fail loudly under TASKGATE_REQUIRE_DB=1.
  galera_up || galera_log "the Galera cluster is not up"
fi
