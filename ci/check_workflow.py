#!/usr/bin/env python3
"""Checks the GitHub workflow: it parses as YAML, every job has steps, every `run:` names a ci/
script that exists and is executable, every matrix entry is non-empty, and every `backend`
matrix value is one that ci/backend.sh accepts. Usage: check_workflow.py WORKFLOW_YML"""
import os
import re
import sys

import yaml

path = sys.argv[1]
workflow = yaml.safe_load(open(path))
errors = []
backend_script = open("ci/backend.sh").read()
accepted = set(re.findall(r"^  ([a-z]+)\)", backend_script, re.M))

jobs = workflow.get("jobs") or {}
if not jobs:
    errors.append("no jobs")
for name, job in jobs.items():
    steps = job.get("steps") or []
    if not steps:
        errors.append(f"{name}: no steps")
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    for key, values in matrix.items():
        if isinstance(values, list) and not values:
            errors.append(f"{name}: matrix {key} is empty")
    for backend in matrix.get("backend", []):
        if backend not in accepted:
            errors.append(f"{name}: matrix backend {backend!r} is not accepted by ci/backend.sh")
    for step in steps:
        run = step.get("run")
        if not run:
            continue
        for script in re.findall(r"\bci/[A-Za-z0-9_./-]+", run):
            if not os.path.isfile(script):
                errors.append(f"{name}: {script} does not exist")
            elif not os.access(script, os.X_OK):
                errors.append(f"{name}: {script} is not executable")

for e in errors:
    print(f"{path}: {e}")
print(f"{path}: {len(jobs)} jobs checked, {'OK' if not errors else f'{len(errors)} problem(s)'}")
sys.exit(1 if errors else 0)
