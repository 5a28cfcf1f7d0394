#!/usr/bin/env bash
# Every feature combination of the core builds with every target (lib, tests, benches, examples),
# then the declared MSRVs build (ci/msrv.sh).
#   bash ci/features.sh                 # powerset check, then MSRV
#   FEATURE_TESTS=1 bash ci/features.sh # also run the tests of every combination (slow: on a
#                                       # shared 2-core machine well over 3 minutes, so opt-in)
set -euo pipefail
cd "$(dirname "$0")/.."
# Warnings are errors here (an import unused in one combination is a bug of that combination),
# in a target folder of its own so that the flags do not rebuild the main one.
export RUSTFLAGS="${RUSTFLAGS:-} -D warnings" CARGO_TARGET_DIR=target/features
cargo hack check --feature-powerset --all-targets -p tollgate
if [ "${FEATURE_TESTS:-0}" = 1 ]; then
  cargo hack test --feature-powerset -p tollgate
fi
bash ci/msrv.sh
