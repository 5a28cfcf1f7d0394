#!/usr/bin/env bash
# Bounded fuzzing of every target against the reference model: FUZZ_SECONDS each (default 30,
# so the whole run stays a few minutes as targets are added; raise it for a longer campaign).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${FUZZ_SECONDS:-30}"
for target in $(cargo +nightly fuzz list); do
  echo "fuzz: $target for ${secs}s"
  cargo +nightly fuzz run "$target" -- -max_total_time="$secs" -print_final_stats=1 2>&1 | tail -n 15
done
