#!/usr/bin/env bash
# Every feature combination of the core builds with every target (tests, benches, examples),
# and passes its tests; then the declared MSRV builds.
#   bash ci/features.sh            # powerset check + test, then MSRV
#   SKIP_FEATURE_TESTS=1 bash ci/features.sh   # powerset check only, then MSRV
set -euo pipefail
cd "$(dirname "$0")/.."
# `std` is implied by `keyed` and `quanta`: --group-features is not needed, the powerset is 8 sets.
cargo hack --feature-powerset --all-targets check -p tollgate
if [ "${SKIP_FEATURE_TESTS:-0}" != 1 ]; then
  cargo hack --feature-powerset test -p tollgate
fi
bash ci/msrv.sh
