#!/usr/bin/env bash
# The layer's own cost per request, in instructions (callgrind), for tollgate-tower and
# tower_governor side by side: examples/layer_cost.rs without the network, so a shared, noisy
# machine cannot blur it. Prints instructions per request for each case and minus `inner`.
#   bash tower/bench/layer_cost.sh [ITERATIONS]   (default 200000)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-200000}
command -v valgrind >/dev/null || { echo "layer_cost.sh: valgrind is not installed" >&2; exit 2; }
cargo build --release -q -p tollgate-tower --example layer_cost
bin=target/release/examples/layer_cost
# Instructions of a run with ITER requests.
count() {
  # Only inside `run` (set-up such as quanta's timing-dependent calibration is not counted).
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='layer_cost::run*' \
    "$bin" "$1" "$2" 2>&1 >/dev/null |
    sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
echo "| case | instructions per request | layer (minus inner) |"
echo "|---|---:|---:|"
base=""
for c in inner tollgate-global tollgate-policy tollgate-ip governor-global governor-ip; do
  # Two run lengths: the difference cancels the first round of 10,000 new keys.
  small=$(count "$c" "$((n / 2))"); big=$(count "$c" "$n")
  per=$(( (big - small) / (n - n / 2) ))
  [[ -z "$base" ]] && base=$per
  echo "| $c | $per | $((per - base)) |"
done
