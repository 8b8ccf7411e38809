#!/usr/bin/env bash
# Verify that the committed components are what the sources build to.
#
# Copies this folder (without target/ and dist/) to a temporary directory,
# runs build.sh there, and fails, naming each offender, when:
# a committed dist/<name>.wasm differs from the fresh build, is missing, or
# is no longer produced by any crate.
# Works because builds are reproducible (see build.sh). Runnable from any
# directory; leaves this folder untouched. KEEP_CHECK_DIR=1 keeps the copy.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
HERE="$(pwd -P)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/components-check.XXXXXX")"
if [ "${KEEP_CHECK_DIR:-0}" != 1 ]; then
  trap 'rm -rf "$WORK"' EXIT
fi
COPY="$WORK/components"
mkdir -p "$COPY"
tar -C "$HERE" --exclude=./target --exclude=./dist -cf - . | tar -C "$COPY" -xf -

echo "check.sh: fresh build in $COPY" >&2
(unset CARGO_TARGET_DIR; "$COPY/build.sh" >/dev/null)

status=0
for fresh in "$COPY"/dist/*.wasm; do
  name="$(basename "$fresh")"
  if [ ! -f "$HERE/dist/$name" ]; then
    echo "check.sh: dist/$name is missing (run build.sh)" >&2
    status=1
  elif ! cmp -s "$fresh" "$HERE/dist/$name"; then
    echo "check.sh: dist/$name differs from a fresh build of ${name%.wasm}" >&2
    status=1
  fi
done
for committed in "$HERE"/dist/*.wasm; do
  [ -e "$committed" ] || continue
  name="$(basename "$committed")"
  if [ ! -f "$COPY/dist/$name" ]; then
    echo "check.sh: dist/$name is not built by any crate any more" >&2
    status=1
  fi
done
if [ "$status" = 0 ]; then
  echo "check.sh: every dist/*.wasm matches a fresh build" >&2
fi
exit "$status"
