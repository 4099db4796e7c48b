#!/usr/bin/env bash
# The memory and SQLite contract suites and worker scenarios once more under a CPU hog: stress-ng
# keeps twice the machine's cores busy while the test binaries that `cargo test --workspace`
# built run again (issue 43: no real-time margin in a case or scenario may depend on an idle
# machine). Installs Debian's stress-ng when it is missing. Run by ci/test.sh after the
# workspace's tests; the case report is not written (every case counts once, in the normal run).
set -euo pipefail
cd "$(dirname "$0")/.."
load_log() { printf '[under-load] %s\n' "$*" >&2; }

if ! command -v stress-ng >/dev/null 2>&1; then
  load_log "installing stress-ng"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q stress-ng >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null 2>&1 \
      && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q stress-ng >/dev/null 2>&1; } \
    || { load_log "could not install stress-ng"; exit 1; }
fi

# The already-built test binaries of the suites (same features as the workspace build: no
# rebuild), with the directory cargo runs each in.
targets=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    pkg = m["package_id"]
    name = m["target"]["name"]
    if name in ("contract", "worker") and ("taskgate-memory" in pkg or "taskgate-sqlite" in pkg):
        print(os.path.dirname(m["manifest_path"]) + " " + m["executable"])
')
if [ "$(printf '%s\n' "$targets" | grep -c .)" -ne 4 ]; then
  load_log "expected 4 test binaries (memory and SQLite: contract, worker), found: $targets"
  exit 1
fi

hogs=$(( 2 * $(nproc) ))
stress-ng --cpu "$hogs" --timeout 1800s --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true' EXIT
load_log "stress-ng: $hogs CPU hogs on $(nproc) cores"
status=0
while read -r dir exe; do
  load_log "$(basename "$exe") in $dir"
  (cd "$dir" && env -u TASKGATE_CASE_REPORT "$exe" -q) || status=1
done <<< "$targets"
load_log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
