#!/usr/bin/env bash
# Bounded fuzzing of every target: the core's against the reference model (fuzz/), then
# tollgate-rls's decoders of untrusted input (rls/fuzz/, a crate of its own), FUZZ_SECONDS each
# (default 30, so the whole run stays a few minutes as targets are added; raise it for a longer
# campaign).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${FUZZ_SECONDS:-30}"
for dir in fuzz rls/fuzz; do
  cd "$root/$dir"
  for target in $(cargo +nightly fuzz list); do
    # libFuzzer raises its length limit only after 100·log2(limit) runs find nothing new.
    # persist_vs_model's short keyed-multi inputs (a restart in their ending) keep finding
    # something, so at that rate the limit stays below the 48 bytes its sharded and keyed
    # limiters read before their first op for all of a 30 s run; a faster one lets them in.
    extra=()
    if [ "$target" = persist_vs_model ]; then extra=(-len_control=20); fi
    # tollgate-rls's decoders promise bounded time on any input: an input slower than 10 s
    # (libFuzzer's default is 20 minutes, longer than the run) fails the run.
    if [ "$dir" = rls/fuzz ]; then extra+=(-timeout=10); fi
    # Committed seeds (seeds/TARGET beside the target, read only: new inputs go to the first corpus folder)
    # for paths a bounded run from an empty corpus does not reach in time: persist_vs_model's
    # `sharded_refill` takes a ShardedBucket's lease to its top near the limit, so that the
    # admission takes the next near lease (`ShardedBucket::refill`), which the fuzzer alone finds
    # only after about a minute.
    corpora=()
    if [ -d "seeds/$target" ]; then
      mkdir -p "corpus/$target"
      corpora=("corpus/$target" "seeds/$target")
    fi
    echo "fuzz: $target for ${secs}s ${extra[*]}"
    cargo +nightly fuzz run "$target" "${corpora[@]}" -- -max_total_time="$secs" -print_final_stats=1 "${extra[@]}" 2>&1 | tail -n 15
  done
done
