#!/usr/bin/env bash
# The declared MSRVs (`rust-version`) build: the core library (Cargo.toml) with every feature and
# with none, the harness (harness/Cargo.toml: its locked dependencies need a newer Rust), and the
# tower layer (tower/Cargo.toml, likewise).
# Tests and benches use newer dev-dependencies and run on stable only.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv_of() { sed -n 's/^rust-version = "\(.*\)"/\1/p' "$1" | head -n1; }
toolchain() { rustup toolchain list | grep -q "^$1" || rustup toolchain install "$1" --profile minimal; }
msrv=$(msrv_of Cargo.toml)
toolchain "$msrv"
cargo "+$msrv" check -p tollgate --all-features --target-dir target/msrv
cargo "+$msrv" check -p tollgate --no-default-features --target-dir target/msrv
cargo "+$msrv" check -p tollgate --no-default-features --features std --target-dir target/msrv
harness_msrv=$(msrv_of harness/Cargo.toml)
toolchain "$harness_msrv"
cargo "+$harness_msrv" check -p tollgate-bench --target-dir target/msrv
# tollgate-redis (redis/Cargo.toml: redis-rs 1.x needs 1.88), with and without its test helpers.
redis_msrv=$(msrv_of redis/Cargo.toml)
toolchain "$redis_msrv"
cargo "+$redis_msrv" check -p tollgate-redis --target-dir target/msrv
cargo "+$redis_msrv" check -p tollgate-redis --features test-support --target-dir target/msrv
tower_msrv=$(msrv_of tower/Cargo.toml)
toolchain "$tower_msrv"
cargo "+$tower_msrv" check -p tollgate-tower --target-dir target/msrv
echo "msrv: tollgate $msrv, tollgate-bench $harness_msrv, tollgate-redis $redis_msrv, tollgate-tower $tower_msrv build"
