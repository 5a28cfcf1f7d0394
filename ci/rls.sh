#!/usr/bin/env bash
# tollgate-rls's gRPC load benchmark in smoke mode: every case for 0.2 s (the local backend and
# the no-op handler, the exact Redis backend and the fixed-window baseline, the window
# boundary), on loopback, built in the test profile (reusing ci/test.sh's build): it checks
# that the benchmark runs; timings on CI are not judged. Its tests (the Envoy end-to-end test
# among them) run in ci/test.sh. The real run: cargo bench -p tollgate-rls --bench grpc_load.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -p tollgate-rls --bench grpc_load -- --smoke
