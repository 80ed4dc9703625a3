#!/usr/bin/env python3
"""A generated folder for an experiment: the working tree's rendering of some kernels.

  variant_gen.py <base generated dir> <out dir> <arch> <stem> ...

Compiles each stem from the working tree's templates (target/release/examples/compile_one,
built beforehand: `cargo build --release --example compile_one`) and writes <out>/<arch>/ with
those cubins and a manifest of just them: the base manifest's entries with each cubin's own
sha256, size and resources. scripts/ab_roots.py then pairs it with the base (list the base
first: its rendering hashes are the ones the staged binaries check)."""
import hashlib
import json
import os
import re
import subprocess
import sys


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    base, out, arch, stems = sys.argv[1], sys.argv[2], sys.argv[3], sorted(set(sys.argv[4:]))
    with open(os.path.join(base, arch, "manifest.json")) as f:
        m = json.load(f)
    by_stem = {k["stem"]: k for k in m["kernels"]}
    dst = os.path.join(out, arch)
    os.makedirs(dst, exist_ok=True)
    kernels = []
    for stem in stems:
        r = subprocess.run(["target/release/examples/compile_one", stem], capture_output=True, text=True)
        res = re.search(r"registers: (\d+), spill_store_bytes: (\d+), spill_load_bytes: (\d+), stack_frame_bytes: (\d+)", r.stderr)
        if r.returncode != 0 or res is None:
            sys.exit(f"{stem}: {r.stderr}")
        with open("/tmp/k.cubin", "rb") as f:
            cubin = f.read()
        with open(os.path.join(dst, stem + ".cubin"), "wb") as f:
            f.write(cubin)
        regs, st, ld, frame = map(int, res.groups())
        k = dict(by_stem[stem])
        k["cubin"] = dict(sha256=hashlib.sha256(cubin).hexdigest(), bytes=len(cubin),
                          resources=dict(registers=regs, spill_store_bytes=st, spill_load_bytes=ld, stack_frame_bytes=frame))
        kernels.append(k)
        print(f"{stem}: {regs} registers, spills {st}/{ld} bytes")
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump(dict(m, kernels=kernels), f, indent=2)


if __name__ == "__main__":
    main()
