#!/usr/bin/env bash
# Build every guest component (release, wasm32-wasip2) and copy each into
# dist/<crate-name>.wasm. Runnable from any directory. Library crates of the
# workspace (LIBRARIES) are compiled into the components and get no dist file.
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

# Every component crate of the workspace, in build order; the dist name is the
# crate name. Plain libraries are listed in LIBRARIES below instead.
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
  guest-escape
  tool-ask
  hook-compact
  hook-probe
)

# Workspace crates that are plain Rust libraries (rlib) linked into the
# components above. They build no .wasm of their own and never reach dist/.
LIBRARIES=(
  guest-http
)

listed() { # listed NAME LIST...: whether NAME is one of LIST
  local name="$1" item
  shift
  for item in "$@"; do
    if [ "$item" = "$name" ]; then return 0; fi
  done
  return 1
}

# A crate folder in neither list would silently never reach dist/ (or, for a
# library, not be known to be one); one in both would be expected in dist/
# although it builds no component.
for manifest in */Cargo.toml; do
  crate="${manifest%/Cargo.toml}"
  if listed "$crate" "${CRATES[@]}"; then
    if listed "$crate" "${LIBRARIES[@]}"; then
      echo "build.sh: crate $crate is listed both in CRATES and in LIBRARIES" >&2
      exit 1
    fi
  elif ! listed "$crate" "${LIBRARIES[@]}"; then
    echo "build.sh: crate $crate is not listed in CRATES (components) or LIBRARIES (plain libraries)" >&2
    exit 1
  fi
done
for crate in "${LIBRARIES[@]}"; do
  if [ ! -f "$crate/Cargo.toml" ]; then
    echo "build.sh: library $crate is listed in LIBRARIES but has no $crate/Cargo.toml" >&2
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
