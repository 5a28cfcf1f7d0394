#!/usr/bin/env bash
# loom models (loom-tests/): every interleaving of 2-3 threads, bounded preemptions.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" \
  cargo test -p tollgate-loom-tests --release --target-dir target/loom "$@"
