#!/usr/bin/env bash
# Instructions per call of every single-bucket scenario (benches/bucket.rs) under callgrind:
# repeatable where timings are not. Usage: ci/callgrind.sh [SCENARIO-FILTER] (N calls, default 200000).
# BENCH=keyed counts the keyed limiter's scenarios (benches/keyed.rs) instead;
# BENCH=metrics FEATURES=metrics the metrics feature's (benches/metrics.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-}"
bench="${BENCH:-bucket}"
n="${N:-200000}"
bin=$(cargo bench --bench "$bench" ${FEATURES:+--features "$FEATURES"} --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
printf '%-34s %s\n' scenario instructions/call
for s in $("$bin" list); do
  case "$s" in *"$filter"*) ;; *) continue ;; esac
  ir=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
    --toggle-collect="$bench::callgrind_loop*" "$bin" callgrind "$s" "$n" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
  printf '%-34s %s\n' "$s" "$(awk -v ir="$ir" -v n="$n" 'BEGIN { printf "%.1f", ir / n }')"
done
