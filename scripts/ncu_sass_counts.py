#!/usr/bin/env python3
"""Executed instructions per unit of work, from ncu's per-SASS-line source page (the
`…-sass.csv.gz` that `scripts/gpu-check.sh profile` keeps): per opcode, and optionally per
address range, each as warp instructions divided by `units` (e.g. tiles x consumer warps),
with its share of the stall samples.

  ncu_sass_counts.py <sass.csv.gz> <units> [--ranges a-b,c-d,...] [--list]

Addresses are offsets from the kernel's first instruction, in hex, as --list prints them
(offset, count per unit, stall samples, the SASS). The fifty-first session's window-tile
breakdown: units = 2732 tiles x 12 consumer warps."""
import csv
import gzip
import sys
from collections import Counter

from sass_loops import opcode  # the predicate-skipping opcode reader, shared


def load(path):
    rows = list(csv.reader(gzip.open(path, "rt")))
    head = rows[1]
    at = {name: head.index(name) for name in ("Address", "Source", "Instructions Executed",
                                               "Warp Stall Sampling (All Samples)")}
    out, base = [], None
    for r in rows[2:]:
        try:
            n = int(r[at["Instructions Executed"]])
        except (ValueError, IndexError):
            continue
        addr = int(r[at["Address"]], 16)
        base = addr if base is None else base
        out.append((addr - base, n, int(r[at["Warp Stall Sampling (All Samples)"]] or 0), r[at["Source"]].strip()))
    return out


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    lines, units = load(args[0]), int(args[1])
    samples = sum(s for _, _, s, _ in lines) or 1
    if "--list" in args:
        for off, n, s, sass in lines:
            print(f"{off:6x} {n / units:8.3f} {s:5d}  {sass}")
        return
    total = sum(n for _, n, _, _ in lines)
    print(f"{total / units:.1f} instructions per unit, {samples} stall samples")
    if "--ranges" in args:
        for span in args[args.index("--ranges") + 1].split(","):
            a, b = (int(x, 16) for x in span.split("-"))
            sel = [(n, s) for off, n, s, _ in lines if a <= off < b]
            print(f"  {a:x}-{b:x}: {sum(n for n, _ in sel) / units:8.1f} per unit, "
                  f"{100 * sum(s for _, s in sel) / samples:5.1f}% of the samples")
        return
    ops, stalls = Counter(), Counter()
    for _, n, s, sass in lines:
        op = opcode(sass) if sass else "?"
        ops[op] += n
        stalls[op] += s
    for op, n in ops.most_common():
        if n / units >= 0.5:
            print(f"  {op:10s} {n / units:8.1f}  {100 * stalls[op] / samples:5.1f}% of the samples")


if __name__ == "__main__":
    main()
