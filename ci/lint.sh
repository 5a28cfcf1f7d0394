#!/usr/bin/env bash
# Formatting, clippy with warnings as errors, and rustdoc with warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
(cd fuzz && cargo fmt -- --check)
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
