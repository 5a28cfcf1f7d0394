#!/usr/bin/env bash
# Benchmarks are compiled, not timed, in CI (timings on shared machines are noise).
set -euo pipefail
cd "$(dirname "$0")/.."
# tollgate-rls's load benchmark is built and run by ci/rls.sh in the test profile (its
# release build would cost minutes for a smoke run whose timings are not judged).
cargo bench --workspace --exclude tollgate-rls --no-run
# The metrics feature's bench (a required feature, so not in the line above).
cargo bench -p tollgate --bench metrics --features metrics --no-run
