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
echo "install: ok ($(rustc --version))"
