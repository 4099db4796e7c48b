#!/usr/bin/env python3
"""Counts, per backend, the contract cases, the model test, the history checker, the
regressions and the worker scenarios that ran, from the machine-readable case report.

Usage: count_cases.py REPORT_DIR CASE_LIST_RS [--workers SCENARIO_LIST_RS] BACKEND...

REPORT_DIR is the directory the test run wrote with TASKGATE_CASE_REPORT=REPORT_DIR set: every
test that `brokertest::contract_tests!` and `workertest::worker_tests!` generate appends one
JSON line per finished case ({"package", "target", "backend", "suite", "name", "outcome",
"detail"}; see brokertest/src/record.rs). CASE_LIST_RS holds the case list (brokertest/src/lib.rs),
SCENARIO_LIST_RS the worker scenarios (workertest/src/lib.rs), BACKEND the backends whose suites
must have run.

Each backend's `tests/contract.rs` (test target `contract`) must have run every case exactly
once, passed or unsupported as the backend declares it (c47 on memory, SQLite and MariaDB), and
passed `model`, `history` and `regressions`; with --workers, its `tests/worker.rs` (target
`worker`) must have passed every scenario exactly once. A skipped case (no database), a failed
one, a missing one or one run twice fails the count (exit 1). Other targets that ran the suite
(SQLite's `server_shaped`) are listed too, and checked the same way. A BACKEND written
`name=target` (or `name:target`) ran both suites in that one test target instead
(`postgres-pgbouncer=pgbouncer`: PostgreSQL through PgBouncer, brokers/postgres/tests/pgbouncer.rs;
`mysql-galera=galera`: the MySQL backend across the Galera nodes, brokers/mysql/tests/galera.rs).
"""
import collections
import glob
import json
import os
import re
import sys

args = sys.argv[1:]
if len(args) < 2:
    print(__doc__)
    sys.exit(2)
report_dir, case_list = args[:2]
rest = args[2:]
worker_list = None
if rest[:1] == ["--workers"]:
    worker_list, rest = rest[1], rest[2:]
required = rest or ["memory", "sqlite", "postgres", "mysql"]


def names_in(path, pattern):
    found = re.findall(r"^ +(" + pattern + r"),$", open(path).read(), re.M)
    if not found:
        print(f"no names found in {path}")
        sys.exit(1)
    return found


cases = names_in(case_list, r"[cq]\d+_[a-z0-9_]+")
scenarios = names_in(worker_list, r"w\d+_[a-z0-9_]+") if worker_list else []
WHOLE = ["model", "history", "regressions"]

# (backend, target, suite) -> name -> [outcome, ...]
runs = collections.defaultdict(lambda: collections.defaultdict(list))
details = {}
files = sorted(glob.glob(os.path.join(report_dir, "*.jsonl")))
for path in files:
    for n, line in enumerate(open(path), 1):
        try:
            r = json.loads(line)
        except ValueError:
            print(f"{path}:{n}: not a JSON line: {line.rstrip()}")
            sys.exit(1)
        key = (r["backend"], r["target"], r["suite"])
        runs[key][r["name"]].append(r["outcome"])
        if r.get("detail"):
            details[key + (r["name"],)] = r["detail"]


def judge(key, expected, allowed):
    """(ok, summary, problems) for the names `expected` under `key`."""
    got = runs.get(key, {})
    tally = collections.Counter()
    if not got:
        return False, tally, [f"{'/'.join(key[1:])}: did not run at all"]
    problems = []
    for name in expected:
        outcomes = got.get(name, [])
        if not outcomes:
            problems.append(f"{name}: did not run")
        elif len(outcomes) > 1:
            problems.append(f"{name}: ran {len(outcomes)} times ({', '.join(outcomes)})")
        elif outcomes[0] not in allowed:
            why = details.get(key + (name,), "")
            problems.append(f"{name}: {outcomes[0]}" + (f" ({why[:200]})" if why else ""))
        else:
            tally[outcomes[0]] += 1
    unknown = sorted(set(got) - set(expected))
    problems += [f"{name}: not in the list" for name in unknown]
    return not problems, tally, problems


status = 0
lines = []
for spec in required:
    backend, _, own_target = spec.partition("=" if "=" in spec else ":")
    main_target = own_target or "contract"
    worker_target = own_target or "worker"
    targets = sorted({t for (b, t, s) in runs if b == backend and s == "contract"})
    if main_target not in targets:
        targets.insert(0, main_target)
    for target in targets:
        label = backend if target == main_target else f"{backend} ({target})"
        ok, tally, problems = judge((backend, target, "contract"), cases,
                                    ("passed", "unsupported"))
        whole_ok = True
        for suite in WHOLE:
            w_ok, _, w_problems = judge((backend, target, suite), [suite], ("passed",))
            whole_ok &= w_ok
            problems += w_problems
        u = tally["unsupported"]
        declared = f" + {u} unsupported as declared" if u else ""
        whole = "model, history, regressions passed" if whole_ok else "model/history/regressions NOT all passed"
        lines.append(f"{label:<24} {tally['passed']:>3}{declared} of {len(cases)} contract cases; {whole}")
        lines += [f"    {p}" for p in problems]
        status |= 0 if ok and whole_ok else 1
    if worker_list:
        ok, tally, problems = judge((backend, worker_target, "worker"), scenarios, ("passed",))
        lines.append(f"{backend + ' (worker)':<24} {tally['passed']:>3} of {len(scenarios)} worker scenarios passed")
        lines += [f"    {p}" for p in problems]
        status |= 0 if ok else 1

print(f"case report: {len(files)} file(s) in {report_dir}")
print("\n".join(lines))
if status:
    print(f"a backend ran fewer than every case ({len(cases)} contract cases, model, history, "
          f"regressions" + (f", {len(scenarios)} worker scenarios" if worker_list else "") + ")")
sys.exit(status)
