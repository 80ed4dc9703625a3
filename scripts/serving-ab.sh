#!/usr/bin/env bash
# A/B of two drop-in libraries on python/tests/bench_serving.py sections, in one GPU run: each
# variant is a libfa4gen.so (another revision's: scripts/ab-baseline.sh <rev> <name> builds
# .stage/ab/<name>/libfa4gen.so), run with an empty kernel library and jit on, so both compile
# their kernels with the GPU host's NVRTC; variants alternate, their order reversed every other
# round (the clock drifts with temperature and power).
#   VARIANTS="old:.stage/ab/old/libfa4gen.so new:.stage/lib/libfa4gen.so" SECTIONS="window-decode" ROUNDS=2 scripts/serving-ab.sh
# SCRIPT=python/tests/profile_decode.py runs that script instead, with SECTIONS as its arguments.
# Every line goes to $OUT/serving-ab.jsonl tagged with its variant and round; a table of each
# row's fa4gen times per variant (medians over the rounds) follows.
set -uo pipefail
OUT=${OUT:-/tmp/fa4gen-out}
mkdir -p "$OUT"
export FA4GEN_JIT=1
: > "$OUT/serving-ab.jsonl"
# bench_serving.py runs window-decode unless told; another script gets only the sections named.
if [ -n "${SCRIPT:-}" ]; then sections=${SECTIONS:-}; else sections=${SECTIONS:-window-decode}; fi
status=0
for round in $(seq 1 "${ROUNDS:-2}"); do
  order=$VARIANTS
  [ $((round % 2)) = 0 ] && order=$(printf '%s\n' $VARIANTS | tac | tr '\n' ' ')
  for v in $order; do
    name=${v%%:*} lib=${v#*:}
    # A library with no kernels: every one compiles at first use, with one compiler for both.
    empty=$(mktemp -d) && mkdir "$empty/sm90"
    python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); m["kernels"] = []; json.dump(m, open(sys.argv[2], "w"))' \
      .stage/generated/sm90/manifest.json "$empty/sm90/manifest.json"
    # shellcheck disable=SC2086 # the sections are separate arguments
    FA4GEN_LIB=$lib FA4GEN_KERNELS=$empty python3 "${SCRIPT:-python/tests/bench_serving.py}" $sections 2>&1 |
      grep -v Warning | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        row = json.loads(line)
    except ValueError:
        print(line, end="", file=sys.stderr)
        continue
    row["variant"], row["round"] = sys.argv[1], int(sys.argv[2])
    print(json.dumps(row), flush=True)' "$name" "$round" >> "$OUT/serving-ab.jsonl"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    rm -rf "$empty"
  done
done
python3 - "$OUT/serving-ab.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ident = lambda r: tuple((k, v) for k, v in r.items() if k not in ("variant", "round", "kernel") and not k.endswith(("_us", "_GBs", "_ms")))
keys, table = [], {}
for r in rows:
    k = ident(r)
    if k not in table:
        keys.append(k)
        table[k] = {}
    for f, v in r.items():
        if f.startswith("fa4gen") and f.endswith("_us") and isinstance(v, (int, float)):
            table[k].setdefault(f, {}).setdefault(r["variant"], []).append(v)
for k in keys:
    print(" ".join(f"{a}={b}" for a, b in k if a not in ("bench",)))
    for f, by in table[k].items():
        print(f"    {f:24s} " + "  ".join(f"{v} {statistics.median(x):9.2f}" for v, x in by.items()))
EOF
exit $status
