#!/usr/bin/env bash
# Formatting, the core's import graph (ci/imports.sh), clippy with warnings as errors (the fuzz
# targets too), and rustdoc with warnings as errors (the core also with its private items).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
# The core's file-level imports: no cycle, and persistence imports nothing above it.
bash ci/imports.sh
(cd fuzz && cargo fmt -- --check)
(cd rls/fuzz && cargo fmt -- --check)
# The fuzz targets are their own workspaces: linted as cargo-fuzz builds them (`cfg(fuzzing)`,
# which also compiles tollgate-rls's `fuzzing` module).
(cd fuzz && RUSTFLAGS="--cfg fuzzing" cargo clippy --all-targets -- -D warnings)
(cd rls/fuzz && RUSTFLAGS="--cfg fuzzing" cargo clippy --all-targets -- -D warnings)
# tollgate-rls's `fuzzing` module (a path dependency there, which clippy does not lint), in
# the same target folder, so that only tollgate-rls itself is checked again.
RUSTFLAGS="--cfg fuzzing" cargo clippy -p tollgate-rls --lib --target-dir rls/fuzz/target -- -D warnings
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
# The core's internal docs too: its design notes live on private items and link to each other.
RUSTDOCFLAGS="-D warnings" cargo doc -p tollgate --no-deps --document-private-items
# As docs.rs builds it (all features), and without default features (the core's links to
# default-feature items are allowed to dangle there; every other rustdoc warning is an error).
RUSTDOCFLAGS="-D warnings" cargo doc -p tollgate --no-deps --all-features
RUSTDOCFLAGS="-D warnings" cargo doc -p tollgate --no-deps --no-default-features
