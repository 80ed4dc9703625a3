#!/usr/bin/env bash
# A/B of template experiments in one GPU run: each variant is a set of environment knobs read
# at render time; kernels compile at first use (FA4GEN_JIT=1), so one staged build serves all.
#   VARIANTS="A: B:FA4GEN_EXP_X=1" SHAPES="256,512,1 128,4096,1,g8,varlen ..." ROUNDS=2 scripts/ab.sh
# (bench_fwd's shapes, serving options included; SDPA times the dense shape beside them)
# A variant without knobs runs the staged cubins (NVRTC 13.5), one with knobs compiles with the
# GPU host's NVRTC, whose code ran an identical d 128 kernel 2% slower: give every variant a knob,
# or build B's kernels ahead as a plan staged in a folder of its own and name it, ROOT=.stage/b
# (such a variant runs with FA4GEN_JIT=0: else the binary re-renders what differs from its own
# templates and compiles that instead). BIN=<path> times a variant with another bench_fwd, e.g.
# the baseline's own build where the kernels' parameters changed (with its own ROOT and manifest;
# scripts/ab-baseline.sh <rev> <name> "<shapes>" builds both, into .stage/ab/<name>).
# Prints a table and writes every line to $OUT/ab.txt (tagged ab-<variant>-<round>.jsonl, ab-sdpa-<round>).
set -uo pipefail
OUT=${OUT:-/tmp/fa4gen-out}
mkdir -p "$OUT"
export FA4GEN_KERNELS=.stage/generated FA4GEN_JIT=1
# The kernel root of a variant: its ROOT= knob, else the staged cubins.
root() { local r=.stage/generated k; for k in ${1//,/ }; do case $k in ROOT=*) r=${k#ROOT=} ;; esac; done; echo "$r"; }
# The bench_fwd of a variant: its BIN= knob, else the staged one.
bin() { local b=.stage/bin/bench_fwd k; for k in ${1//,/ }; do case $k in BIN=*) b=${k#BIN=} ;; esac; done; echo "$b"; }
# A variant's environment: its knobs, and no JIT where it names its own kernels.
knobs_of() { local k=${1#*:}; case $k in *ROOT=*) k="$k,FA4GEN_JIT=0" ;; esac; echo "${k//,/ }"; }
# Compile every variant's kernels first, in parallel (one --one launch per variant and shape),
# so the timed rounds hit the jit cache.
for v in $VARIANTS; do
  knobs=$(knobs_of "$v")
  for shape in $SHAPES; do
    env $knobs "$(bin "$knobs")" "$(root "$knobs")" --one "$shape" > /dev/null 2>&1 &
    while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-12}" ]; do wait -n; done
  done
done
wait
# Variants run back to back on each shape, their order reversed every other round: the GPU's
# clock drifts with its temperature and power (the 700 W cap), and a variant always timed first
# read up to 2.4% faster than an identical kernel timed after it.
# Per-round files live outside $OUT (the device tool returns a few files only); each finished
# round's lines go to $OUT/ab.txt at once and a line per shape is printed, so a call that runs
# out of time still brings back every round it finished.
WORK=$(mktemp -d)
: > "$OUT/ab.txt"
for round in $(seq 1 "${ROUNDS:-2}"); do
  order=$VARIANTS
  [ $((round % 2)) = 0 ] && order=$(printf '%s\n' $VARIANTS | tac | tr '\n' ' ')
  for shape in $SHAPES; do
    for v in $order; do
      name=${v%%:*}; knobs=$(knobs_of "$v")
      env $knobs "$(bin "$knobs")" "$(root "$knobs")" "$shape" >> "$WORK/ab-$name-$round.jsonl" 2>> "$WORK/ab-$name-$round.err"
    done
  done
  python3 scripts/bench_sdpa.py $SHAPES > "$WORK/ab-sdpa-$round.jsonl" 2> "$WORK/ab-sdpa-$round.err"
  # Every line tagged with the file it came from.
  for f in "$WORK"/ab-*-"$round".jsonl; do sed "s/^{/{\"file\":\"$(basename "$f")\",/" "$f"; done >> "$OUT/ab.txt"
  python3 - "$round" "$WORK"/ab-*-"$round".jsonl <<'PY'
import json, os, sys
rows = {}
for f in sys.argv[2:]:
    name = os.path.basename(f)[3:].rsplit("-", 1)[0]
    for l in open(f):
        if l.startswith("{") and "tflops" in (r := json.loads(l)):
            col = name if r.get("impl") == "fa4gen" else r.get("impl")
            rows.setdefault((r.get("d"), r.get("s"), r.get("causal")), {})[col] = r["tflops"]
for key, cols in rows.items():
    print(f"round {sys.argv[1]} {key}: " + "  ".join(f"{c} {v}" for c, v in sorted(cols.items())), flush=True)
PY
done
python3 - "$WORK" <<'PY'
import glob, json, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "ab-*.jsonl"))):
    name = os.path.basename(f)[3:-6]
    for l in open(f):
        if not l.startswith("{"): continue
        r = json.loads(l)
        if "tflops" not in r: continue
        key = (r.get("d"), r.get("s"), r.get("causal")) + ((r["tag"],) if r.get("tag") else ())
        col = r.get("impl")
        if col == "fa4gen":  # the variant, and the tile where shapes force several
            tile = next((f for f in r.get("kernel", "").split(".") if f.startswith("m") and "n" in f), "")
            col = name.rsplit("-", 1)[0] + (f" {tile}" if tile else "")
        rows.setdefault(key, {}).setdefault(col, []).append(r["tflops"])
for key in sorted(rows, key=str):
    print(key, "  ".join(f"{c} {'/'.join(str(x) for x in v)}" for c, v in sorted(rows[key].items())))
PY
grep -h -i -E "error|panic" "$WORK"/ab-*.err | head
rm -rf "$WORK"
