#!/usr/bin/env bash
# Benchmarks are compiled, not timed, in CI (timings on shared machines are noise).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --workspace --no-run
# The metrics feature's bench (a required feature, so not in the line above).
cargo bench -p tollgate --bench metrics --features metrics --no-run
