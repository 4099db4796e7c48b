#!/usr/bin/env python3
"""Counts, per backend, the contract cases that passed in one `cargo test` log.

Usage: count_cases.py BUILD_JSON TEST_LOG CASE_LIST_RS BACKEND...

BUILD_JSON is `cargo test --no-run --message-format=json` output (maps executables to packages),
TEST_LOG the captured `cargo test` output, CASE_LIST_RS the file holding the case list, BACKEND the backends
whose suites must have run. Exits 1 when one of them did not run, or ran fewer than every case.
A case the backend declares it does not support (an "*** UNSUPPORTED" line) counts as run: it
is reported, not passed, and it is not a failure.
"""
import json
import re
import sys

build_json, test_log, case_list = sys.argv[1:4]
required = sys.argv[4:] or ["memory", "sqlite", "postgres", "mysql"]
expected = len(re.findall(r"^ +([cq]\d+_[a-z_]+),$", open(case_list).read(), re.M))

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

def backend_of(package, target):
    if package == "brokertest" and target in ("memory", "sqlite", "postgres", "mysql"):
        return target
    m = re.match(r"taskgate-(memory|sqlite|postgres|mysql)$", package)
    if m and target == "contract":
        return m.group(1)
    return None

passed, suites, skipped, unsupported = {}, {}, {}, {}
current = None
for line in open(test_log):
    m = re.match(r"\s+Running .*\((.*)\)\s*$", line)
    if m:
        current = backend_of(*targets.get(m.group(1), ("", "")))
        if current:
            suites[current] = suites.get(current, 0) + 1
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
sys.exit(status)
