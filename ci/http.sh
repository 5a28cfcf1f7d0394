#!/usr/bin/env bash
# The HTTP layer's load test in smoke mode: every case runs (2 s each, wrk on loopback) and the
# correctness run (--rate 1000/s --burst 100) must stay within its bound. Timings are not judged.
set -euo pipefail
cd "$(dirname "$0")/.."
SMOKE=1 bash tower/bench/http.sh
