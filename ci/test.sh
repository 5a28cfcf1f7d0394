#!/usr/bin/env bash
# The test command from README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
