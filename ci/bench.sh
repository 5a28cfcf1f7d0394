#!/usr/bin/env bash
# Benchmarks are compiled, not timed, in CI (timings on shared machines are noise).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --workspace --no-run
