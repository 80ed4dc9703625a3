#!/usr/bin/env python3
"""A generated folder for an experiment: the working tree's rendering of some kernels.

  variant_gen.py <base generated dir> <out dir> <arch> <stem> ...

Compiles each stem from the working tree's templates (target/release/examples/compile_one,
built beforehand: `cargo build --release --example compile_one`) and writes <out>/<arch>/ with
those cubins and a manifest of just them, each entry compile_one's (this tree's rendering hash,
the cubin's own sha256, size and resources). scripts/ab_roots.py pairs it with the base (list
the base first: its rendering hashes are the ones the staged binaries check); a stem the base
lacks keeps this tree's hash, so stage binaries of this tree to load it."""
import hashlib
import json
import os
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
        for f in ("/tmp/k.cubin", "/tmp/k.entry.json"):
            if os.path.exists(f):
                os.remove(f)
        r = subprocess.run(["target/release/examples/compile_one", stem], capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists("/tmp/k.entry.json"):
            sys.exit(f"{stem}: {r.stderr}")
        with open("/tmp/k.cubin", "rb") as f:
            cubin = f.read()
        with open("/tmp/k.entry.json") as f:
            k = json.load(f)
        assert k["cubin"]["sha256"] == hashlib.sha256(cubin).hexdigest()
        with open(os.path.join(dst, stem + ".cubin"), "wb") as f:
            f.write(cubin)
        if stem in by_stem:
            # The base's rendering hash (what the staged binaries check), the variant's cubin and
            # launch shape (a variant may lay shared memory out differently).
            k = dict(by_stem[stem], cubin=k["cubin"], threads=k["threads"], smem_bytes=k["smem_bytes"])
        kernels.append(k)
        res = k["cubin"].get("resources") or {}
        print(f"{stem}: {res.get('registers')} registers, spills {res.get('spill_store_bytes')}/{res.get('spill_load_bytes')} bytes")
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump(dict(m, kernels=kernels), f, indent=2)


if __name__ == "__main__":
    main()
