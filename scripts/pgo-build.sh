#!/usr/bin/env bash
# Builds a profile-guided (PGO) release `capsule` for deployment.
#
#   bash scripts/pgo-build.sh                    # prints the path of the optimised binary at the end
#   bash scripts/pgo-build.sh --bolt             # the same, then the binary's code laid out again by
#                                                # BOLT from a second training run (needs llvm-bolt)
#   bash scripts/pgo-build.sh --train-only BIN   # runs only the training sessions with BIN (CI does
#                                                # this with the dev build, so the training stays valid)
#   bash scripts/pgo-build.sh --bolt-only BIN    # only the BOLT steps, on BIN (a build linked with
#                                                # --emit-relocs, as --bolt makes it)
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
# With --bolt, step 3 links with --emit-relocs, and then:
#   4. BOLT instruments that binary, the training runs again with it, and BOLT rewrites the
#      binary with the hot code of a turn packed together (BENCHMARKS.md, "Twenty-ninth pass").
# The result is target/pgo-bolt/capsule; target/pgo-use's binary is kept beside it.
#
# Needs `llvm-profdata` from the toolchain's `llvm-tools` component; the script adds it. --bolt
# also needs `llvm-bolt`, `merge-fdata` and BOLT's instrumentation runtime (Debian: `apt-get
# install bolt-19`) and binutils' `objcopy`; the script names what is missing.
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

# bolt_tool NAME: the path of BOLT's NAME (`llvm-bolt`, `merge-fdata`), versioned or not.
bolt_tool() {
  local name=$1 candidate
  for candidate in "$name" "$name-19" "$name-20" "$name-21" "$name-22"; do
    if command -v "$candidate" > /dev/null; then
      command -v "$candidate"
      return
    fi
  done
  echo "E-PGO-TOOLS: BOLT's $name is not installed. On Debian: apt-get install bolt-19" >&2
  echo "(any BOLT from LLVM 19 on works); or build without --bolt." >&2
  exit 1
}

# bolt BIN: BIN (linked with --emit-relocs) instrumented, trained and rewritten into
# target/pgo-bolt/capsule.
bolt() {
  local bin=$1
  local llvm_bolt merge_fdata runtime_lib
  llvm_bolt=$(bolt_tool llvm-bolt)
  merge_fdata=$(bolt_tool merge-fdata)
  # The instrumentation runtime sits in the lib folder beside BOLT's own bin folder.
  runtime_lib="$(dirname "$(realpath "$llvm_bolt")")/../lib/libbolt_rt_instr.a"
  if [[ ! -f $runtime_lib ]]; then
    echo "E-PGO-TOOLS: BOLT's instrumentation runtime $runtime_lib is missing." >&2
    echo "Install BOLT whole (Debian: apt-get install bolt-19), or build without --bolt." >&2
    exit 1
  fi
  if ! readelf -S "$bin" | grep -q '\.rela\.text'; then
    echo "E-PGO-RELOCS: $bin was not linked with --emit-relocs, which BOLT needs to move code." >&2
    echo "Build it with --bolt (or RUSTFLAGS=-Clink-arg=-Wl,--emit-relocs), then run again." >&2
    exit 1
  fi
  # BOLT takes any symbol with `.cold` or `.warm` in its name for the split-off part of another
  # function and stops when there is none: `warm_up` and `warm_call_thread` are whole
  # functions. Renamed in the copy BOLT reads; the code is untouched.
  local renames=() symbol n=0
  while read -r symbol; do
    n=$((n + 1))
    renames+=("--redefine-sym=$symbol=capsule_bolt_renamed_$n")
  done < <(nm "$bin" | awk '{print $NF}' | grep -E '\.(cold|warm)' || true)
  objcopy "${renames[@]}" "$bin" "$work/capsule-bolt-in"

  # BOLT 19 puts its own library folder before the path it is given, absolute or not; enough
  # `..` to climb past any folder (`/..` is `/`) make the path reach the file either way.
  local climb
  climb=$(printf '../%.0s' $(seq 32))
  local fdata="$work/bolt-fdata"
  mkdir -p "$fdata"
  "$llvm_bolt" "$work/capsule-bolt-in" -o "$work/capsule-bolt-instrumented" -instrument \
    -runtime-instrumentation-lib="$climb$(realpath "$runtime_lib")" -instrumentation-file="$fdata/capsule" \
    -instrumentation-file-append-pid > "$work/bolt-instrument.log" 2>&1 \
    || { cat "$work/bolt-instrument.log" >&2; exit 1; }
  train "$work/capsule-bolt-instrumented"
  "$merge_fdata" "$fdata"/*.fdata > "$work/capsule.fdata" 2> "$work/bolt-merge.log" \
    || { cat "$work/bolt-merge.log" >&2; exit 1; }
  mkdir -p "$root/target/pgo-bolt"
  "$llvm_bolt" "$work/capsule-bolt-in" -o "$root/target/pgo-bolt/capsule" -data="$work/capsule.fdata" \
    -reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold -split-eh \
    -icf=1 -use-gnu-stack > "$work/bolt-optimise.log" 2>&1 \
    || { cat "$work/bolt-optimise.log" >&2; exit 1; }
  # The rewritten binary must still run the training's sessions to their end.
  train "$root/target/pgo-bolt/capsule"
  echo "built $root/target/pgo-bolt/capsule"
}

case ${1:-} in
  --train-only)
    bin=$(realpath "${2:?usage: pgo-build.sh --train-only BIN}")
    train "$bin"
    echo "the training sessions all ended ok with $bin"
    exit 0
    ;;
  --bolt-only)
    bolt "$(realpath "${2:?usage: pgo-build.sh --bolt-only BIN}")"
    exit 0
    ;;
  --bolt | "") ;;
  *)
    echo "usage: pgo-build.sh [--bolt | --train-only BIN | --bolt-only BIN]" >&2
    exit 2
    ;;
esac
with_bolt=${1:-}

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
flags="-Cprofile-use=$work/capsule.profdata"
# BOLT moves code, so it needs the link's relocations kept in the binary.
if [[ $with_bolt == --bolt ]]; then
  flags="$flags -Clink-arg=-Wl,--emit-relocs"
fi
RUSTFLAGS="$flags" cargo build --release --locked --bin capsule --target "$host" --target-dir target/pgo-use
echo "built $root/target/pgo-use/$host/release/capsule"
if [[ $with_bolt == --bolt ]]; then
  echo "== 4/4 BOLT: instrument, train, lay out again (target/pgo-bolt)"
  bolt "$root/target/pgo-use/$host/release/capsule"
fi
