#!/usr/bin/env python3
"""Kernel roots for an A/B of two template versions (scripts/ab.sh's ROOT= variants).

  ab_roots.py <out> <arch> <stems file> <name>=<generated dir> ...

Each <generated dir> holds <arch>/manifest.json and the cubins (a `cargo xtask gen` output
folder: generated/, generated/plans/<plan>, or another checkout's). The stems can come from
`bench_fwd --stems <shapes>`; each must be built in every variant. <out>/<name>/<arch> gets
those cubins and a manifest of just them.

The runtime loads a kernel only if its manifest's source_sha256 (and headers_sha256) match
what the running binary renders for it, so every variant's manifest carries the FIRST
variant's rendering hashes: build the binaries from the first variant's tree and list it
first; the other variants' cubins then load under its names. Their own cubin hashes stay, so
the loader still checks each file against what was built.

The binary also decides how each kernel launches (CTA pairs, grid) by its own rules: where a
variant's kernels cannot take that launch (the baseline has no pair code and the binary pairs
the call), force the launch with the binary's knob (ROOT=...,FA4GEN_CTA_PAIRS=0), else that
variant hangs."""
import json
import os
import shutil
import sys


def load(gen_dir, arch):
    path = os.path.join(gen_dir, arch, "manifest.json")
    with open(path) as f:
        return json.load(f)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    out, arch, stems_file = sys.argv[1:4]
    variants = [a.split("=", 1) for a in sys.argv[4:]]
    with open(stems_file) as f:
        stems = sorted({s.strip() for s in f if s.strip() and not s.startswith("#")})
    first = None
    for name, gen_dir in variants:
        m = load(gen_dir, arch)
        by_stem = {k["stem"]: k for k in m["kernels"]}
        missing = [s for s in stems if s not in by_stem]
        if missing:
            sys.exit(f"{name} ({gen_dir}) lacks {missing}")
        if first is None:
            first = (m["headers_sha256"], {s: by_stem[s]["source_sha256"] for s in stems})
        dst = os.path.join(out, name, arch)
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        kernels = []
        for s in stems:
            k = dict(by_stem[s], source_sha256=first[1][s])
            shutil.copy(os.path.join(gen_dir, arch, s + ".cubin"), dst)
            kernels.append(k)
        with open(os.path.join(dst, "manifest.json"), "w") as f:
            json.dump(dict(m, headers_sha256=first[0], kernels=kernels), f, indent=2)
        print(f"{name}: {len(kernels)} kernels in {dst}")


if __name__ == "__main__":
    main()
