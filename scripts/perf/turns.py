#!/usr/bin/env python3
"""Per-turn measurements of `capsule run` against the provider stub (BENCHMARKS.md, #16).

Each run starts a fresh stub, runs `examples/hello` (its component paths made absolute, room
for the long session) on an N-turn script in which every turn asks the file tool to list the
folder, and reads the stub's record of the requests. A turn's overhead is the time between two
provider requests minus the stub's own time on the first (what the #16 targets count).

  turns.py ab N ROUNDS A B    alternate A and B; medians per window, and the rounds B was lower
  turns.py split BIN [RUNS]   a turn split by the `inference` trace lines (call, loop, rest)
  turns.py start ROUNDS A B   whole 8-turn runs, alternating: wall time and peak RSS
  turns.py cold ROUNDS A B    1-turn runs with an empty component cache each, alternating: spawn
                              to the first provider byte, turn 1 (its tool call), wall, peak RSS
  turns.py warm ROUNDS A B    the same with one filled cache (each binary's first run fills it)
  turns.py timeline BIN       one 110-turn run on a syscall timeline (needs `perf`)
  turns.py callgrind BIN [N1 N2 ...]
                              instructions a turn: (110-turn run - 10-turn run) / 100 (valgrind);
                              with counts, each step's (0 1 2 3: turns 1, 2 and 3 alone)

The stub is `$STUB stub-provider` (default: the first binary named), so A and B answer to the
same stub. Compare figures within one invocation: this machine's speed drifts between runs.
"""

import atexit
import glob
import json
import os
import re
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORK = tempfile.mkdtemp(prefix="capsule-turns-")
atexit.register(shutil.rmtree, WORK, ignore_errors=True)


def script(turns):
    """The N-turn script: N tool-call turns, then an answer."""
    path = os.path.join(WORK, f"script{turns}.json")
    if not os.path.exists(path):
        calls = [{"name": "files", "input": {"op": "list", "path": "."}}]
        body = [{"text": f"step {i}", "tool_calls": calls} for i in range(turns)] + [{"text": "done"}]
        with open(path, "w") as f:
            json.dump({"turns": body}, f)
    return path


def capsule():
    """examples/hello with absolute component paths and max_turns 130."""
    folder = os.path.join(WORK, "hello")
    if not os.path.isdir(folder):
        os.makedirs(folder)
        text = open(os.path.join(ROOT, "examples/hello/murmur.yaml")).read()
        text = text.replace("../../components", os.path.join(ROOT, "components"))
        text = re.sub(r"max_turns: \d+", "max_turns: 130", text)
        with open(os.path.join(folder, "murmur.yaml"), "w") as f:
            f.write(text)
    return folder


def run(binary, turns, stub, prefix=(), args=()):
    """One session; (the stub's request records, the session folder, wall seconds, the spawn's
    Unix time in ns)."""
    proc = subprocess.Popen([stub, "stub-provider", "--script", script(turns)], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().split()[-1]
        cwd = tempfile.mkdtemp(dir=WORK)
        env = dict(os.environ, ANTHROPIC_API_KEY="bench")
        t0 = time.perf_counter()
        spawned = time.time_ns()
        done = subprocess.run([*prefix, binary, "run", capsule(), "--endpoint", url, "--task", "go", *args],
                              cwd=cwd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"{binary} failed ({done.returncode}): {done.stderr[-800:]}")
        reqs = json.load(urllib.request.urlopen(url.rstrip("/") + "/_stub/requests"))
    finally:
        proc.kill()
        proc.wait()
    if len(reqs) < turns + 1:
        sys.exit(f"{binary}: {len(reqs)} requests for a {turns}-turn script")
    return reqs, cwd, wall, spawned


def overheads(reqs):
    """Turn k's overhead in ms (k = 1 is the gap between the first two requests)."""
    return [(reqs[t]["received_unix_ns"] - reqs[t - 1]["received_unix_ns"] - reqs[t - 1]["stub_elapsed_ns"]) / 1e6
            for t in range(1, len(reqs))]


WINDOWS = (("turn 1", 0, 1), ("turns 2-20", 1, 20), ("turns 41-60", 40, 60), ("turns 81-100", 80, 100),
           ("turns 2-111", 1, None))


def ab(turns, rounds, a, b):
    """A and B may be the same binary (an A/A run shows the noise)."""
    stub = os.environ.get("STUB", a)
    res = ([], [])
    for i in range(rounds):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            res[side].append(overheads(run((a, b)[side], turns, stub)[0]))
    for name, lo, hi in WINDOWS:
        xa = [st.median(o[lo:hi]) for o in res[0]]
        xb = [st.median(o[lo:hi]) for o in res[1]]
        lower = sum(y < x for x, y in zip(xa, xb))
        print(f"{name:14s} {st.median(xa):.3f} / {st.median(xb):.3f}  (B lower in {lower}/{rounds})")


def split(binary, runs):
    rows = []
    for _ in range(runs):
        reqs, cwd, _, _ = run(binary, 110, os.environ.get("STUB", binary))
        trace = glob.glob(os.path.join(cwd, "capsule-work/hello/ses_*/trace.jsonl"))[0]
        inference = [e for e in map(json.loads, open(trace)) if e["event_type"] == "inference"]
        for k in range(2, len(reqs) - 1):
            stub_ms = reqs[k - 1]["stub_elapsed_ns"] / 1e6
            over = (reqs[k]["received_unix_ns"] - reqs[k - 1]["received_unix_ns"]) / 1e6 - stub_ms
            line = inference[k - 1]
            rows.append((over, line["call_ms"] - stub_ms, line["duration_ms"] - line["call_ms"]))
    for i, name in enumerate(("overhead", "the call minus the stub's time", "the loop around the call")):
        print(f"{name:32s} {st.median(r[i] for r in rows):.3f} ms")


def start(rounds, a, b):
    stub = os.environ.get("STUB", a)
    res = ([], [])
    out = os.path.join(WORK, "time.txt")
    for i in range(rounds):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            # GNU time's maximum resident set of the capsule process, in KiB.
            _, _, wall, _ = run((a, b)[side], 8, stub, prefix=("/usr/bin/time", "-f", "%M", "-o", out))
            res[side].append((wall * 1000, int(open(out).read().split()[-1]) / 1024))
    for i, name in enumerate(("wall ms", "peak RSS MiB")):
        xa = [r[i] for r in res[0]]
        xb = [r[i] for r in res[1]]
        lower = sum(y < x for x, y in zip(xa, xb))
        print(f"{name:14s} {st.median(xa):.2f} / {st.median(xb):.2f}  (B lower in {lower}/{rounds})")


def first(rounds, a, b, warm):
    stub = os.environ.get("STUB", a)
    res = ([], [])
    out = os.path.join(WORK, "time.txt")
    filled = tempfile.mkdtemp(dir=WORK)
    if warm:
        for binary in (a, b):
            run(binary, 1, stub, args=("--cache-dir", filled))
    for i in range(rounds):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            cache = filled if warm else tempfile.mkdtemp(dir=WORK)
            reqs, _, wall, spawned = run((a, b)[side], 1, stub, prefix=("/usr/bin/time", "-f", "%M", "-o", out),
                                         args=("--cache-dir", cache))
            first = (reqs[0]["received_unix_ns"] - spawned) / 1e6
            rss = int(open(out).read().split()[-1]) / 1024
            res[side].append((first, overheads(reqs)[0], wall * 1000, rss))
    names = ("first byte ms", "turn 1 ms", "wall ms", "peak RSS MiB")
    for i, name in enumerate(names):
        xa = [r[i] for r in res[0]]
        xb = [r[i] for r in res[1]]
        lower = sum(y < x for x, y in zip(xa, xb))
        print(f"{name:14s} {st.median(xa):.2f} / {st.median(xb):.2f}  (B lower in {lower}/{rounds})")


def timeline(binary):
    """Segments of each turn from syscall tracepoints on CLOCK_MONOTONIC, lined up with the
    stub's record by the smallest gap between a request's `writev` and its arrival."""
    data = os.path.join(WORK, "timeline.data")
    events = ["writev", "recvfrom", "futex", "write"]
    prefix = ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-c", "1", "-o", data]
    for e in events:
        prefix += ["-e", f"syscalls:sys_enter_{e}"]
    reqs, _, _, _ = run(binary, 110, os.environ.get("STUB", binary), prefix=prefix)
    text = subprocess.run(["perf", "script", "-i", data, "-F", "tid,time,event", "--ns"],
                          capture_output=True, text=True).stdout
    ev = []
    for line in text.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+syscalls:sys_enter_(\w+)", line)
        if m:
            ev.append((int(m.group(1)), float(m.group(2)) * 1e6, m.group(3)))
    main = ev[0][0]
    sends = [i for i, e in enumerate(ev) if e[2] == "writev" and e[0] == main]
    off = min(r["received_unix_ns"] / 1e3 - ev[s][1] for r, s in zip(reqs, sends))
    rows = []
    for k in range(min(len(sends), len(reqs)) - 1):
        s, n = sends[k], sends[k + 1]
        wake = next((i for i in range(s + 1, n) if ev[i][0] == main and ev[i][2] == "futex"), None)
        if wake is None:
            continue
        read = [i for i in range(s + 1, wake) if ev[i][2] == "recvfrom"][-1]
        done = next((e[1] for e in ev[wake:n] if e[0] != main and e[2] == "write"), ev[wake][1])
        last = reqs[k]["event_sent_unix_ns"][-1] / 1e3 - off
        over = (reqs[k + 1]["received_unix_ns"] - reqs[k]["received_unix_ns"] - reqs[k]["stub_elapsed_ns"]) / 1e3
        rows.append((k + 1, ev[read][1] - last, ev[wake][1] - ev[read][1], done - ev[wake][1], ev[n][1] - done, over))
    print("window        last event -> read | read -> tool | tool | tool done -> request | overhead (us)")
    for name, lo, hi in WINDOWS[:4]:
        sel = [r for r in rows if lo < r[0] <= hi]
        cells = " | ".join(f"{st.median(r[i] for r in sel):7.1f}" for i in range(1, 6))
        print(f"{name:14s} {cells}")


def callgrind(binary, counts=(10, 110)):
    """Instructions of whole runs of each turn count, and what each added turn cost on average
    (the counts 0 1 2 3 give turn 1, 2 and 3 alone)."""
    totals = {}
    for turns in counts:
        out = os.path.join(WORK, f"callgrind.{turns}")
        run(binary, turns, os.environ.get("STUB", binary),
            prefix=("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"))
        with open(out) as f:
            totals[turns] = int(next(l for l in f if l.startswith("summary:")).split()[1])
    print("  ".join(f"{t} turns {totals[t]:,}" for t in counts))
    for a, b in zip(counts, counts[1:]):
        label = f"turn {b}" if b - a == 1 else f"turns {a + 1}-{b}"
        print(f"{label}: {(totals[b] - totals[a]) / (b - a):,.0f} a turn")
    print("(run it twice: the first run may compile the components for valgrind's allocator)")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd = argv[1]
    # Binaries run from each session's own folder: name them absolutely.
    args = [a if a.isdigit() else os.path.abspath(a) for a in argv[2:]]
    if cmd == "ab" and len(args) == 4:
        ab(int(args[0]), int(args[1]), args[2], args[3])
    elif cmd == "split" and len(args) in (1, 2):
        split(args[0], int(args[1]) if len(args) == 2 else 5)
    elif cmd == "start" and len(args) == 3:
        start(int(args[0]), args[1], args[2])
    elif cmd in ("cold", "warm") and len(args) == 3:
        first(int(args[0]), args[1], args[2], cmd == "warm")
    elif cmd == "timeline" and len(args) == 1:
        timeline(args[0])
    elif cmd == "callgrind" and len(args) >= 1 and not args[0].isdigit():
        counts = tuple(int(a) for a in args[1:]) or (10, 110)
        if len(counts) < 2 or list(counts) != sorted(set(counts)):
            sys.exit("callgrind BIN [N1 N2 ...]: at least two turn counts, increasing")
        callgrind(args[0], counts)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
