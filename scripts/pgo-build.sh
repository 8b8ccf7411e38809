#!/usr/bin/env bash
# Builds a profile-guided (PGO) release `capsule` for deployment.
#
#   bash scripts/pgo-build.sh                    # prints the path of the optimised binary at the end
#   bash scripts/pgo-build.sh --train-only BIN   # runs only the training sessions with BIN (CI does
#                                                # this with the dev build, so the training stays valid)
#
# Three steps, each in its own target folder so the plain release build is left alone:
#   1. an instrumented release build (target/pgo-gen), which counts the branches and calls it runs;
#   2. a training run of that binary, offline, against the built-in provider stub: long tool-call
#      sessions in both provider formats, terminal and `--json` output, and the two demos; every
#      session must end `ok`;
#   3. the release build again (target/pgo-use), with LLVM told which code is hot and which cold.
# The result is target/pgo-use/<host triple>/release/capsule. It behaves exactly as the plain
# build; only code layout and inlining differ (docs/decisions.md, "Building"; BENCHMARKS.md,
# "Twenty-eighth pass"). Each build is a whole fat-LTO build: plan on two long compiles.
#
# Needs `llvm-profdata` from the toolchain's `llvm-tools` component; the script adds it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

work=$(mktemp -d)
stub=""
# A session that fails leaves its stub running: stop it, then remove the scratch folder.
trap '[[ -n $stub ]] && kill "$stub" 2> /dev/null; rm -rf "$work"' EXIT

# train BIN: the training sessions. Each `capsule run` exits non-zero unless its task ends `ok`.
train() {
  local bin=$1
  # A 110-turn session: each turn the model asks the file tool to list the folder; then it answers.
  {
    printf '{"turns": ['
    for i in $(seq 0 109); do
      printf '{"text": "step %d", "tool_calls": [{"name": "files", "input": {"op": "list", "path": "."}}]},' "$i"
    done
    printf '{"text": "done"}]}\n'
  } > "$work/script.json"

  # The two examples with their component paths made absolute and room for the long session.
  local example
  for example in hello openai; do
    mkdir -p "$work/$example"
    sed -e "s#\.\./\.\./components#$root/components#" -e 's/max_turns: [0-9]*/max_turns: 130/' \
      "examples/$example/murmur.yaml" > "$work/$example/murmur.yaml"
  done

  for _ in 1 2 3; do run_session "$bin" "$work/hello" ANTHROPIC_API_KEY; done
  run_session "$bin" "$work/hello" ANTHROPIC_API_KEY --json
  for _ in 1 2; do run_session "$bin" "$work/openai" OPENAI_API_KEY; done
  "$bin" demo --workdir "$work/demo-anthropic" > /dev/null
  "$bin" demo --provider openai --workdir "$work/demo-openai" > /dev/null
}

# run_session BIN CAPSULE KEY_VARIABLE [capsule run options…]
run_session() {
  local bin=$1 capsule=$2 key=$3
  shift 3
  local stub_out="$work/stub.out" url=""
  "$bin" stub-provider --script "$work/script.json" > "$stub_out" &
  stub=$!
  for _ in $(seq 300); do
    url=$(grep -o 'http://[^ ]*' "$stub_out" | head -n 1 || true)
    [[ -n $url ]] && break
    sleep 0.1
  done
  if [[ -z $url ]]; then
    echo "E-PGO-STUB: the provider stub did not print its address within 30 s; it printed:" >&2
    cat "$stub_out" >&2
    exit 1
  fi
  local session_dir
  session_dir=$(mktemp -d -p "$work")
  (cd "$session_dir" && env "$key=training" "$bin" run "$capsule" --endpoint "$url" --task go \
    "$@" > /dev/null)
  kill "$stub"
  wait "$stub" 2> /dev/null || true
  stub=""
}

if [[ ${1:-} == --train-only ]]; then
  bin=$(realpath "${2:?usage: pgo-build.sh --train-only BIN}")
  train "$bin"
  echo "the training sessions all ended ok with $bin"
  exit 0
fi

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [[ ! -x $profdata ]]; then
  rustup component add llvm-tools
fi
if [[ ! -x $profdata ]]; then
  echo "E-PGO-TOOLS: $profdata is missing after 'rustup component add llvm-tools'." >&2
  echo "Install the llvm-tools component of the toolchain rustc belongs to, then run again." >&2
  exit 1
fi

# The counts go to a fixed folder, so that a second run's instrumented build is incremental.
raw="$root/target/pgo-gen/profraw"
rm -rf "$raw"
mkdir -p "$raw"

echo "== 1/3 instrumented build (target/pgo-gen)"
RUSTFLAGS="-Cprofile-generate=$raw" cargo build --release --locked --bin capsule \
  --target "$host" --target-dir target/pgo-gen

echo "== 2/3 training run"
train "$root/target/pgo-gen/$host/release/capsule"
"$profdata" merge -o "$work/capsule.profdata" "$raw"

echo "== 3/3 optimised build (target/pgo-use)"
RUSTFLAGS="-Cprofile-use=$work/capsule.profdata" cargo build --release --locked --bin capsule \
  --target "$host" --target-dir target/pgo-use
echo "built $root/target/pgo-use/$host/release/capsule"
