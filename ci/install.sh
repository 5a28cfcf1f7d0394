#!/usr/bin/env bash
# Installs what the other ci/*.sh scripts need on a fresh machine. Idempotent.
set -euo pipefail
if ! command -v cargo >/dev/null 2>&1; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
rustup component add rustfmt clippy >/dev/null
rustup target add thumbv7m-none-eabi >/dev/null
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
command -v cargo-hack >/dev/null 2>&1 || cargo install cargo-hack --locked
# The MSRV toolchains ci/msrv.sh builds with (`rust-version` of the core, the harness, the layer).
for manifest in Cargo.toml harness/Cargo.toml tower/Cargo.toml; do
  msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$(dirname "$0")/../$manifest" | head -n1)
  rustup toolchain list | grep -q "^$msrv" || rustup toolchain install "$msrv" --profile minimal
done
# wrk: the HTTP load generator of tower/bench/http.sh (ci/http.sh).
if ! command -v wrk >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq wrk >/dev/null
fi
echo "install: ok ($(rustc --version))"
