#!/usr/bin/env python3
"""Read `ncu --page raw --csv` on stdin; print each warp-stall reason's cycles per issued
instruction (smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio), largest first."""
import csv
import sys

rows = list(csv.reader(sys.stdin))
if len(rows) < 3:
    sys.exit("no ncu raw rows on stdin")
names, values = rows[0], rows[-1]  # header, units, then one row per profiled kernel
prefix, suffix = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
stalls = []
for name, value in zip(names, values):
    if name.startswith(prefix) and name.endswith(suffix):
        try:
            stalls.append((float(value.replace(",", "")), name[len(prefix):-len(suffix)]))
        except ValueError:
            pass
if not stalls:  # another ncu's names: show whatever it calls a stall
    for name, value in zip(names, values):
        if "stall" in name:
            print(name, value)
    sys.exit(0)
total = sum(v for v, _ in stalls)
for v, reason in sorted(stalls, reverse=True):
    if v > 0.005:
        print(f"{reason:28s} {v:6.2f} cycles per issue ({100 * v / total:4.1f}%)")
print(f"{'total':28s} {total:6.2f}")
