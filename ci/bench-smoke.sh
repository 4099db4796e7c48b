#!/usr/bin/env bash
# Runs every criterion benchmark once (`--test`), so benches never rot. PostgreSQL and MySQL
# benches run when their URLs are set and say they skip otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p benches --locked -- --test
