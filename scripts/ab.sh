#!/usr/bin/env bash
# A/B of template experiments in one GPU run: each variant is a set of environment knobs read
# at render time; kernels compile at first use (FA4GEN_JIT=1), so one staged build serves all.
#   VARIANTS="A: B:FA4GEN_EXP_X=1" SHAPES="256,512,1 ..." ROUNDS=2 scripts/ab.sh
# Prints a table and writes every line to $OUT/ab.txt (tagged ab-<variant>-<round>.jsonl, ab-sdpa-<round>).
set -uo pipefail
OUT=${OUT:-/tmp/fa4gen-out}
mkdir -p "$OUT"
export FA4GEN_KERNELS=.stage/generated FA4GEN_JIT=1
# Compile every variant's kernels first, in parallel (one --one launch per variant and shape),
# so the timed rounds hit the jit cache.
for v in $VARIANTS; do
  knobs=${v#*:}
  for shape in $SHAPES; do
    env ${knobs//,/ } .stage/bin/bench_fwd .stage/generated --one "$shape" > /dev/null 2>&1 &
    while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-12}" ]; do wait -n; done
  done
done
wait
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    name=${v%%:*}; knobs=${v#*:}
    env ${knobs//,/ } .stage/bin/bench_fwd .stage/generated $SHAPES > "$OUT/ab-$name-$round.jsonl" 2> "$OUT/ab-$name-$round.err"
  done
  python3 scripts/bench_sdpa.py $SHAPES > "$OUT/ab-sdpa-$round.jsonl" 2> "$OUT/ab-sdpa-$round.err"
done
python3 - "$OUT" <<'PY'
import glob, json, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "ab-*.jsonl"))):
    name = os.path.basename(f)[3:-6]
    for l in open(f):
        if not l.startswith("{"): continue
        r = json.loads(l)
        if "tflops" not in r: continue
        key = (r.get("d"), r.get("s"), r.get("causal"))
        col = r.get("impl")
        if col == "fa4gen":  # the variant, and the tile where shapes force several
            tile = next((f for f in r.get("kernel", "").split(".") if f.startswith("m") and "n" in f), "")
            col = name.rsplit("-", 1)[0] + (f" {tile}" if tile else "")
        rows.setdefault(key, {}).setdefault(col, []).append(r["tflops"])
for key in sorted(rows, key=str):
    print(key, "  ".join(f"{c} {'/'.join(str(x) for x in v)}" for c, v in sorted(rows[key].items())))
PY
# One file for the record (the device tool returns a few files only): every line tagged with
# the file it came from; the per-round files and their logs then go.
for f in "$OUT"/ab-*.jsonl; do sed "s/^{/{\"file\":\"$(basename "$f")\",/" "$f"; done > "$OUT/ab.txt"
grep -h -i -E "error|panic" "$OUT"/ab-*.err | head
rm -f "$OUT"/ab-*.jsonl "$OUT"/ab-*.err
