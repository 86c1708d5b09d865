#!/usr/bin/env bash
# Turns a `perf record --call-graph dwarf` profile of the server into a flame graph:
#   bash scripts/flamegraph.sh /tmp/perf.data benches/flamegraph-k50.svg "title"
# Needs perf (Debian: linux-perf) and inferno (`cargo install inferno`).
#
# DWARF unwinding copies a fixed slice of each stack, so many samples of deep async stacks do
# not reach the thread's start and would each begin somewhere else. Every stack is therefore
# cut at its outermost frame of this crate; stacks with none keep what was unwound, under one
# "(outside deep_research frames)" root.
set -euo pipefail
data=${1:?perf.data}
out=${2:?output.svg}
title=${3:-deep-research server}

perf script -i "$data" 2>/dev/null |
    inferno-collapse-perf |
    python3 -c '
import collections, sys
out = collections.Counter()
for line in sys.stdin:
    stack, n = line.rsplit(" ", 1)
    frames = stack.split(";")
    ours = next((i for i, f in enumerate(frames) if "deep_research" in f), None)
    if ours is not None:
        frames = frames[ours:]
    else:
        frames = ["(outside deep_research frames)"] + [f for f in frames[1:] if f != "[unknown]"]
    out[";".join(["deep-research server"] + frames)] += int(n)
for stack, n in out.items():
    print(stack, n)
' |
    inferno-flamegraph --title "$title" --minwidth 0.1 \
        --subtitle "perf record --call-graph dwarf; stacks cut at their outermost deep_research frame" \
        >"$out"
echo "wrote $out"
