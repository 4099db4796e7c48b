#!/usr/bin/env bash
# Formatting, lints and docs, with warnings denied.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

step "workflow file"
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install --quiet pyyaml
python3 ci/check_workflow.py .github/workflows/ci.yml

step "the shipped binary links no test hook and no testcontainers"
tree=$(cargo tree -p taskgate-cli -e features --locked)
if grep -E 'testcontainers|test-hooks|sqltest' <<<"$tree"; then
  echo "taskgate-cli depends on test machinery (above)" >&2
  exit 1
fi

step "docs name files that exist and counts the code has"
python3 ci/check_docs.py
