#!/usr/bin/env bash
# Load test with a real client (wrk) on loopback, bounded in time. A benchmark, not a test:
# the numbers depend on the machine and on what else runs on it.
#
#   bash tower/bench/http.sh            # full run: ROUNDS=5 rounds of DURATION=6 s per case
#   SMOKE=1 bash tower/bench/http.sh    # CI smoke: 1 round of 2 s per case on debug binaries,
#                                       # checks that it all works (the numbers mean nothing)
#
# Cases, side by side in each round (same app, same wrk settings, interleaved so that drifting
# background load hits every case alike; the table shows the median over rounds):
#   unlimited              example server --unlimited (the baseline)
#   unlimited + xff        the same, with wrk's per-request X-Forwarded-For script (its cost)
#   tollgate global        --key global, a limit high enough to admit everything
#   tollgate per-IP 10k    --key ip --trusted-proxies 127.0.0.1/32, 10,000 client addresses
#   governor global        tower_governor, GlobalKeyExtractor, admits everything
#   governor per-IP 10k    tower_governor, SmartIpKeyExtractor, the same 10,000 addresses
# Then the correctness run: --key global --rate 1000/s --burst 100 for CORRECT_SECS (10 s;
# 2 s in smoke mode) must answer at most 100 + 1000·t responses 200 (t: wrk's measured
# duration, to the microsecond from tower/bench/duration.lua, not its summary's 10 ms) and at least 99 % of 100 + 1000·d (d: the nominal duration, d <= t); then the same for the
# policy --limit 1000/s:100 --limit 30000/min:500 (both bounds, the tighter counts). The script
# exits 1 if any bound fails.
#
# Environment: DURATION (s per case), ROUNDS, CONNECTIONS (wrk -c, default 64), THREADS (wrk
# -t, default 1), PROFILE (release, or debug), SMOKE=1.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ "${SMOKE:-0}" == 1 ]]; then
  # Debug binaries: CI's `cargo test --workspace` has built them already (no release build).
  DURATION=${DURATION:-2}; ROUNDS=${ROUNDS:-1}; CORRECT_SECS=${CORRECT_SECS:-2}; WARMUP=0
  PROFILE=${PROFILE:-debug}
else
  DURATION=${DURATION:-6}; ROUNDS=${ROUNDS:-5}; CORRECT_SECS=${CORRECT_SECS:-10}; WARMUP=1
  PROFILE=${PROFILE:-release}
fi
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
LUA=tower/bench/xff.lua
HIGH=1000000000/s # admits everything: the runs measure the layer, not refusals

command -v wrk >/dev/null || { echo "http.sh: wrk is not installed (Debian package wrk)" >&2; exit 2; }
if [[ "$PROFILE" == release ]]; then
  cargo build --release -q -p tollgate-tower --example server --example governor
else
  cargo build -q -p tollgate-tower --example server --example governor
fi
BIN=target/$PROFILE/examples

work=$(mktemp -d)
server_pid=""
# terminate PID: SIGTERM, then SIGKILL if it has not exited within 10 s (a graceful shutdown
# that hangs must not hang the run); the exit status of a process that exited in time, else 1.
terminate() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "http.sh: the server did not exit within 10 s of SIGTERM: killed" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  wait "$pid"
}
cleanup() {
  if [[ -n "$server_pid" ]]; then terminate "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# start BINARY ARGS...: runs a server on a free loopback port, sets $addr.
start() {
  # Emptied here, before the launch: the launched shell truncates the file only once it runs,
  # and until then the loop below could read the previous server's address (a CI run on a
  # loaded machine sent wrk to a stopped server: "Connection refused").
  : >"$work/server.out"
  "$@" --listen 127.0.0.1:0 >"$work/server.out" 2>"$work/server.err" &
  server_pid=$!
  addr=""
  for _ in $(seq 1 200); do
    addr=$(sed -n 's/^listening on //p' "$work/server.out")
    [[ -n "$addr" ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "http.sh: the server did not start: $* ($(cat "$work/server.err"))" >&2
  exit 1
}

stop() {
  local pid=$server_pid
  server_pid=""
  terminate "$pid" || { echo "http.sh: the server did not exit cleanly" >&2; exit 1; }
}

# load SECS [wrk args...]: wrk against $addr; prints "rps p50_us p99_us non2xx total secs".
load() {
  local secs=$1; shift
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"${secs}s" --latency "$@" "http://$addr/" >"$work/wrk.out"
  awk '
    function us(v) {
      if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1000000; return v
    }
    /requests in/ { total = $1; if (secs == "") { secs = $4; sub(/s,?$/, "", secs) } }
    /^duration_us / { secs = $2 / 1000000 }
    /Requests\/sec/ { rps = $2 }
    $1 == "50%" { p50 = us($2) }
    $1 == "99%" { p99 = us($2) }
    /Non-2xx or 3xx responses/ { non = $5 }
    END { printf "%s %s %s %d %s %s\n", rps, p50, p99, non, total, secs }
  ' "$work/wrk.out"
}

cases=("unlimited" "unlimited + xff" "tollgate global" "tollgate per-IP 10k" "governor global" "governor per-IP 10k")
run_case() {
  case "$1" in
    "unlimited")           start "$BIN/server" --unlimited;                                   extra=() ;;
    "unlimited + xff")     start "$BIN/server" --unlimited;                                   extra=(-s "$LUA") ;;
    "tollgate global")     start "$BIN/server" --key global --rate "$HIGH";                   extra=() ;;
    "tollgate per-IP 10k") start "$BIN/server" --key ip --trusted-proxies 127.0.0.1/32 --rate "$HIGH"; extra=(-s "$LUA") ;;
    "governor global")     start "$BIN/governor" --key global;                                extra=() ;;
    "governor per-IP 10k") start "$BIN/governor" --key ip;                                    extra=(-s "$LUA") ;;
  esac
  if [[ "$WARMUP" == 1 ]]; then load 1 "${extra[@]}" >/dev/null; fi
  local cpu0 result
  cpu0=$(cpu_ticks)
  result=$(load "$DURATION" "${extra[@]}")
  # The server's own CPU time per request: far less sensitive to what else runs on the machine
  # than requests/s (which is what the other tenants of a shared machine take away).
  echo "$result $(cpu_ticks)" | awk -v c0="$cpu0" -v hz="$(getconf CLK_TCK)" '{
    printf "%s %.2f\n", $0, ($7 - c0) * 1000000 / hz / $5
  }' | cut -d' ' -f1-6,8
  stop
}

# The server's user + system CPU time so far, in clock ticks.
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$server_pid/stat"
}

echo "# tollgate-tower load test: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs"
echo "# $(lscpu | sed -n 's/^Model name: *//p'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $PROFILE build; wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s --latency, $ROUNDS round(s), median shown"
: >"$work/results"
for round in $(seq 1 "$ROUNDS"); do
  for c in "${cases[@]}"; do
    run_case "$c" >"$work/line" # not in a subshell: the EXIT trap must see $server_pid
    line=$(cat "$work/line")
    echo "$c|$line" >>"$work/results"
    echo "  round $round: $c: $line" >&2
  done
done

echo
echo "| case | requests/s | vs baseline | p50 | p99 | server CPU per request | non-2xx |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for c in "${cases[@]}"; do
  grep -F "$c|" "$work/results" | awk -F'|' -v name="$c" '$1 == name { print $2 }' >"$work/case"
  med() { cut -d' ' -f"$1" "$work/case" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  rps=$(med 1); p50=$(med 2); p99=$(med 3); non=$(med 4); cpu=$(med 7)
  [[ "$c" == "unlimited" ]] && base=$rps
  [[ "$c" == "unlimited + xff" ]] && base_xff=$rps
  ref=${base}; [[ "$c" == *"10k"* ]] && ref=${base_xff:-$base}
  awk -v c="$c" -v r="$rps" -v b="$ref" -v p50="$p50" -v p99="$p99" -v n="$non" -v cpu="$cpu" 'BEGIN {
    printf "| %s | %.0f | %+.1f %% | %.0f µs | %.0f µs | %.1f µs | %d |\n", c, r, (r / b - 1) * 100, p50, p99, cpu, n
  }'
done
echo
echo "(baseline: 'unlimited'; for the per-IP rows 'unlimited + xff', which pays the same wrk script)"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# The correctness run: the limiter under overload admits exactly its quota, no more.
echo
start "$BIN/server" --key global --rate 1000/s --burst 100
load "$CORRECT_SECS" -s tower/bench/duration.lua >"$work/line"
read -r _ _ _ non total secs <"$work/line"
stop
ok200=$((total - non))
# Upper bound over wrk's measured window t (it contains every request the server saw); lower
# bound over the nominal load period d <= t (wrk's t also counts connection set-up and the last
# responses in flight, which on a busy 2-core machine is tens of ms).
awk -v ok="$ok200" -v t="$secs" -v d="$CORRECT_SECS" -v total="$total" 'BEGIN {
  upper = 100 + 1000 * t
  lower = 0.99 * (100 + 1000 * (d < t ? d : t))
  printf "correctness: --rate 1000/s --burst 100, wrk -d%ss (measured %.6f s): %d responses, %d of them 200; at most 100 + 1000*%.6f = %.1f, at least 99 %% of 100 + 1000*%s = %.0f\n", d, t, total, ok, t, upper, d, lower
  if (ok > upper) { print "correctness: FAILED (over-admission)"; exit 1 }
  if (ok < lower) { print "correctness: FAILED (under-admission)"; exit 1 }
  print "correctness: ok"
}'

# The same for a policy of two quotas (--limit, all or nothing): 1000/s with a burst of 100 and
# 30,000/min (500/s) with a burst of 500 must both hold, so at most
# min(100 + 1000·t, 500 + 500·t) responses 200, and at least 99 % of that bound over d.
echo
start "$BIN/server" --key global --limit 1000/s:100 --limit 30000/min:500
load "$CORRECT_SECS" -s tower/bench/duration.lua >"$work/line"
read -r _ _ _ non total secs <"$work/line"
stop
ok200=$((total - non))
awk -v ok="$ok200" -v t="$secs" -v d="$CORRECT_SECS" -v total="$total" '
  function bound(x) { a = 100 + 1000 * x; b = 500 + 500 * x; return a < b ? a : b }
  BEGIN {
  upper = bound(t)
  lower = 0.99 * bound(d < t ? d : t)
  printf "correctness: --limit 1000/s:100 --limit 30000/min:500, wrk -d%ss (measured %.6f s): %d responses, %d of them 200; at most %.1f, at least %.0f\n", d, t, total, ok, upper, lower
  if (ok > upper) { print "correctness: FAILED (over-admission)"; exit 1 }
  if (ok < lower) { print "correctness: FAILED (under-admission)"; exit 1 }
  print "correctness: ok"
}'
