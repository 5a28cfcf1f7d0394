#!/usr/bin/env bash
# The core builds without std for a target without native 64-bit atomics (portable-atomic path).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p tollgate --no-default-features --target thumbv7m-none-eabi
