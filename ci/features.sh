#!/usr/bin/env bash
# Every feature combination of the core builds with every target (lib, its unit tests,
# integration tests, benches, examples), then the declared MSRVs build (ci/msrv.sh).
#   bash ci/features.sh                 # powerset check, then MSRV
#   FEATURE_TESTS=1 bash ci/features.sh # also run the tests of every combination (slow: on a
#                                       # shared 2-core machine well over 3 minutes, so opt-in)
set -euo pipefail
cd "$(dirname "$0")/.."
# Warnings are errors here (an import unused in one combination is a bug of that combination),
# in a target folder of its own so that the flags do not rebuild the main one.
export RUSTFLAGS="${RUSTFLAGS:-} -D warnings" CARGO_TARGET_DIR=target/features
# cargo hack runs each combination with `--manifest-path Cargo.toml`, which at this workspace's
# root selects its default members: the harness and tollgate-redis depend on the core with its
# default features, and cargo unifies those into every combination, so none of them would be
# checked without `std`. The combinations come from cargo hack; each runs with `-p tollgate`.
# `counters` (internal, for the harness) is left out of the powerset, which it would double, and
# checked on its own and with every feature.
combinations() {
  cargo hack "$1" --feature-powerset -p tollgate --no-manifest-path --print-command-list \
    --exclude-features counters
  echo "cargo $1 --no-default-features --features counters"
  echo "cargo $1 --all-features"
}
each() {
  local list n=0
  list=$(combinations "$1")
  [ -n "$list" ] || { echo "cargo hack listed no feature combinations" >&2; exit 1; }
  while read -r cargo command flags; do
    n=$((n + 1))
    echo "--- $command -p tollgate ${*:2} $flags"
    # shellcheck disable=SC2086 # the flags are words without spaces (features joined by commas)
    "$cargo" "$command" -p tollgate "${@:2}" $flags
  done <<<"$list"
  echo "--- $n feature combinations: ok"
}
each check --all-targets
if [ "${FEATURE_TESTS:-0}" = 1 ]; then
  each test
fi
bash ci/msrv.sh
