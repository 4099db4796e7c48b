#!/usr/bin/env python3
"""Counts, per backend, the contract cases and the worker scenarios that passed in one
`cargo test` log.

Usage: count_cases.py BUILD_JSON TEST_LOG CASE_LIST_RS [--workers SCENARIO_LIST_RS] BACKEND...

BUILD_JSON is `cargo test --no-run --message-format=json` output (maps executables to packages),
TEST_LOG the captured `cargo test` output, CASE_LIST_RS the file holding the case list, BACKEND the backends
whose suites must have run. Exits 1 when one of them did not run, or ran fewer than every case.
A case the backend declares it does not support (an "*** UNSUPPORTED" line) counts as run: it
is reported, not passed, and it is not a failure.

With --workers (workertest/src/lib.rs, the `w01_…` list), each backend's `tests/worker.rs`
(`taskgate-<backend>`, test target `worker`) must also have run and passed every worker
scenario; a skipped scenario (no database: "*** SKIPPED") does not count as passed.
"""
import json
import re
import sys

build_json, test_log, case_list = sys.argv[1:4]
rest = sys.argv[4:]
worker_list = None
if rest[:1] == ["--workers"]:
    worker_list, rest = rest[1], rest[2:]
required = rest or ["memory", "sqlite", "postgres", "mysql"]
expected = len(re.findall(r"^ +([cq]\d+_[a-z_]+),$", open(case_list).read(), re.M))
SCENARIO = r"w\d+_[a-z0-9_]+"
expected_w = 0
if worker_list:
    expected_w = len(re.findall(r"^ +(" + SCENARIO + r"),$", open(worker_list).read(), re.M))
    if expected_w == 0:
        print(f"no worker scenarios found in {worker_list}")
        sys.exit(1)

# executable path -> (package, test target)
targets = {}
for line in open(build_json):
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
        pkg = msg["package_id"]
        name = re.search(r"#?([A-Za-z0-9_-]+)@", pkg) or re.search(r"/([A-Za-z0-9_-]+)#", pkg)
        targets[msg["executable"]] = (name.group(1) if name else pkg, msg["target"]["name"])

def suite_of(package, target):
    """(backend, "contract" | "worker") for a suite binary, else None."""
    if package == "brokertest" and target in ("memory", "sqlite", "postgres", "mysql"):
        return (target, "contract")
    m = re.match(r"taskgate-(memory|sqlite|postgres|mysql)$", package)
    if m and target in ("contract", "worker"):
        return (m.group(1), target)
    return None

# Worker suites, counted on their own.
w_passed, w_suites, w_skipped = {}, {}, {}

passed, suites, skipped, unsupported = {}, {}, {}, {}
current, worker = None, None
for line in open(test_log):
    m = re.match(r"\s+Running .*\((.*)\)\s*$", line)
    if m:
        current, worker = None, None
        suite = suite_of(*targets.get(m.group(1), ("", "")))
        if suite and suite[1] == "contract":
            current = suite[0]
            suites[current] = suites.get(current, 0) + 1
        elif suite and worker_list:
            worker = suite[0]
            w_suites[worker] = w_suites.get(worker, 0) + 1
        continue
    if worker:
        if re.match(r"^test " + SCENARIO + r" \.\.\. ok$", line.rstrip("\n")):
            w_passed[worker] = w_passed.get(worker, 0) + 1
        if "*** SKIPPED" in line:
            w_skipped[worker] = w_skipped.get(worker, 0) + 1
        continue
    if current and re.match(r"^test [cq]\d+_[a-z_]+ \.\.\. ok$", line.rstrip("\n")):
        passed[current] = passed.get(current, 0) + 1
    if current and "*** SKIPPED" in line:
        # A skipped case reports "ok" to the test harness; it did not run.
        skipped[current] = skipped.get(current, 0) + 1
    if current and "*** UNSUPPORTED" in line:
        # Reported "ok" as well: the backend declares it lacks what the case needs.
        unsupported[current] = unsupported.get(current, 0) + 1

status = 0
for backend in required:
    if backend not in suites:
        print(f"{backend:<9} its contract suite did not run")
        status = 1
        continue
    u = unsupported.get(backend, 0)
    n = passed.get(backend, 0) - skipped.get(backend, 0) - u
    runs = suites[backend]
    ok = n + u == expected * runs
    declared = f", {u} unsupported as declared" if u else ""
    print(f"{backend:<9} {n:>4} / {expected * runs} contract cases passed{declared} "
          f"({runs} suite run(s))")
    status |= 0 if ok else 1
if status:
    print(f"a backend ran fewer than all {expected} contract cases")
w_status = 0
if worker_list:
    for backend in required:
        if backend not in w_suites:
            print(f"{backend:<9} its worker suite (tests/worker.rs) did not run")
            w_status = 1
            continue
        runs = w_suites[backend]
        n = w_passed.get(backend, 0) - w_skipped.get(backend, 0)
        print(f"{backend:<9} {n:>4} / {expected_w * runs} worker scenarios passed ({runs} suite run(s))")
        w_status |= 0 if n == expected_w * runs else 1
    if w_status:
        print(f"a backend ran fewer than all {expected_w} worker scenarios")
sys.exit(status | w_status)
