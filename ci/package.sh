#!/usr/bin/env bash
# The core is publishable: `cargo package` builds the packaged sources on their own (no network
# beyond the registry the lock file already names), and `cargo publish --dry-run` checks the
# manifest as crates.io would. The harness, loom models and fuzzer are `publish = false`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo package -p tollgate
cargo package -p tollgate --list | grep -qx LICENSE-MIT
cargo package -p tollgate --list | grep -qx LICENSE-APACHE
if cargo package -p tollgate --list | grep -E '^(ci|\.ci|docs|fuzz|loom-tests|harness)/'; then
  echo "package: CI, docs, fuzz, loom or harness files would be published (see above)" >&2
  exit 1
fi
cargo publish --dry-run -p tollgate
# The satellites depend on this version of tollgate, not yet on crates.io: cargo packages them
# together with it (a local overlay for the unpublished dependency). Not verified by a rebuild
# here: the test step already built and tested them from the same sources.
cargo package -p tollgate -p tollgate-redis -p tollgate-tower --no-verify
for crate in tollgate-redis tollgate-tower; do
  cargo package -p "$crate" --no-verify --list | grep -qx README.md
done
# docs.rs builds with nightly, every feature and `--cfg docsrs` (the `doc(cfg)` labels).
RUSTDOCFLAGS="--cfg docsrs -D warnings" cargo +nightly doc -p tollgate --all-features --no-deps \
  --target-dir target/docsrs
