#!/usr/bin/env bash
# Build every guest component (release, wasm32-wasip2) and copy each into
# dist/<crate-name>.wasm. Runnable from any directory.
#
# Reproducible: absolute paths that would otherwise end up in panic messages
# (this folder, the cargo registry) are remapped to fixed names, so the same
# sources and toolchain give byte-identical components wherever they sit.
# check.sh relies on that.
#
# Environment: CARGO_TARGET_DIR is honoured (default ./target);
# BUILD_JOBS sets cargo's -j (default 1).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
HERE="$(pwd -P)"
TARGET=wasm32-wasip2

# Every crate of the workspace, in build order; the dist name is the crate name.
CRATES=(
  driver-anthropic
  driver-openai
  driver-legacy
  tool-files
  guest-read-outside-scope
  guest-dial-unlisted-host
  guest-read-env
  guest-balloon-memory
  guest-spin-forever
  driver-trap
  driver-stateful
  tool-panic
  guest-imports-unknown
  guest-no-run-export
)

# A crate folder missing from CRATES would silently never reach dist/.
for manifest in */Cargo.toml; do
  crate="${manifest%/Cargo.toml}"
  if [[ " ${CRATES[*]} " != *" $crate "* ]]; then
    echo "build.sh: crate $crate is not listed in CRATES" >&2
    exit 1
  fi
done

if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  rustup target add "$TARGET"
fi

CARGO_HOME_DIR="$(cd "${CARGO_HOME:-$HOME/.cargo}" 2>/dev/null && pwd -P || echo "${CARGO_HOME:-$HOME/.cargo}")"
export RUSTFLAGS="--remap-path-prefix=$HERE=/components --remap-path-prefix=$CARGO_HOME_DIR=/cargo"

nice -n 10 cargo build --release --locked --target "$TARGET" -j "${BUILD_JOBS:-1}"

OUT="${CARGO_TARGET_DIR:-target}/$TARGET/release"
mkdir -p dist
for crate in "${CRATES[@]}"; do
  lib="$OUT/${crate//-/_}.wasm" # a cdylib: dashes become underscores
  bin="$OUT/$crate.wasm"        # a [[bin]] keeps its name
  if [ -f "$lib" ]; then src="$lib"; elif [ -f "$bin" ]; then src="$bin"; else
    echo "build.sh: no output for $crate (looked for $lib and $bin)" >&2
    exit 1
  fi
  cp "$src" "dist/$crate.wasm"
done

for crate in "${CRATES[@]}"; do
  printf '%8d  dist/%s.wasm\n' "$(wc -c <"dist/$crate.wasm")" "$crate"
done
