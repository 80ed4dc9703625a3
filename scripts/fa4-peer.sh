#!/usr/bin/env bash
# FA4 itself as a peer on the GPU host, which has PyTorch but neither FA4 nor a network.
# The wheels (pinned below) are 100 MB, and a device call carries at most 64 MiB, so they travel
# in two halves, on two calls to one warm machine:
#   here:    scripts/fa4-peer.sh fetch     # wheels into .fa4whl/{a,b} (ignored), ~50 MB each
#   device:  scripts/fa4-peer.sh put a     # carry [".fa4whl/a"]: kept in /tmp/fa4parts
#   device:  scripts/fa4-peer.sh put b     # carry [".fa4whl/b"]: joined, unpacked into /tmp/fa4site
#   device:  scripts/fa4-peer.sh check     # one FA4 call beside cuDNN
#   device:  scripts/fa4-peer.sh sass [d,s,causal ...]   # FA4's kernels' SASS into $OUT
#   device:  scripts/fa4-peer.sh profile [d,s,causal ...]   # ncu on FA4's and fa4gen's forward
#            (PROFILE_WHO="fa4 fa4gen cudnn" adds torch SDPA's cuDNN kernel)
#   device:  eval "$(scripts/fa4-peer.sh env)"; FA4_PEER=1 scripts/gpu-check.sh rounds
# The wheels are unpacked, not pip-installed: pip would want the cu12 libraries the cutlass DSL's
# metadata names (another 90 MB), and the DSL picks the cu13 flavour it finds (driver 580 = 13.0).
set -euo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$SELF")/.."
FA4=flash-attn-4==4.0.0b36   # the version of shared/notes/h200-anchors.md
DSL=4.8.1                    # nvidia-cutlass-dsl (FA4 asks >= 4.6.2)
PARTS=/tmp/fa4parts
SITE=/tmp/fa4site

# A peer's forward at the #4 matrix's shape (B·S 16k, H·d 2048; d 192: H 16, dv 128), called
# $5 times: `python3 "$(peer_call_script)" fa4|cudnn d s causal calls`. fa4 is FA4's
# flash_attn_func; cudnn is torch SDPA on its cuDNN backend.
peer_call_script() {
  local f
  f=$(mktemp --suffix=.py)
  cat > "$f" <<'PY'
import sys, torch
who = sys.argv[1]
d, s, c, n = (int(x) for x in sys.argv[2:])
b, h = max(16384 // s, 1), (16 if d == 192 else 2048 // d)
rows = (b, s, h) if who == "fa4" else (b, h, s)  # FA4 takes (B, S, H, d), SDPA (B, H, S, d)
q, k = (torch.randn(*rows, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
v = torch.randn(*rows, 128 if d == 192 else d, device="cuda", dtype=torch.bfloat16)
if who == "fa4":
    from flash_attn.cute import flash_attn_func
    for _ in range(n):
        flash_attn_func(q, k, v, causal=bool(c))
else:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for _ in range(n):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(c))
torch.cuda.synchronize()
PY
  echo "$f"
}

case ${1:-} in
  fetch)
    rm -rf .fa4whl && mkdir -p .fa4whl/all .fa4whl/a .fa4whl/b
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .fa4whl/all "$FA4" "nvidia-cutlass-dsl==$DSL" \
      "nvidia-cutlass-dsl-libs-base==$DSL" "nvidia-cutlass-dsl-libs-core==$DSL" "nvidia-cutlass-dsl-libs-cu13==$DSL" \
      "apache-tvm-ffi==0.1.15.post2" "torch-c-dlpack-ext==0.1.5" "quack-kernels==0.6.5"
    big=$(ls .fa4whl/all/nvidia_cutlass_dsl_libs_cu13-*.whl)
    # The big wheel's first 46 MB go in a; its rest and every other wheel in b.
    split -b 46M -d "$big" .fa4whl/part.
    mv .fa4whl/part.00 .fa4whl/a/
    mv .fa4whl/part.* .fa4whl/b/
    find .fa4whl/all -name '*.whl' ! -name "$(basename "$big")" -exec mv {} .fa4whl/b/ \;
    basename "$big" > .fa4whl/b/big-name
    sha256sum "$big" | cut -d' ' -f1 > .fa4whl/b/big-sha256
    rm -rf .fa4whl/all
    du -sb .fa4whl/a .fa4whl/b
    ;;
  put)
    [ "${2:-}" = a ] || [ "${2:-}" = b ] || { echo "usage: $0 put a|b" >&2; exit 2; }
    mkdir -p "$PARTS"
    cp ".fa4whl/$2"/* "$PARTS/"
    if [ "$2" = b ]; then
      big="$PARTS/$(cat "$PARTS/big-name")"
      cat "$PARTS"/part.* > "$big"
      echo "$(cat "$PARTS/big-sha256")  $big" | sha256sum -c -
      rm -rf "$SITE" && mkdir -p "$SITE"
      for w in "$PARTS"/*.whl; do python3 -m zipfile -e "$w" "$SITE"; done
      du -sh "$SITE"
    fi
    ls -la "$PARTS"
    ;;
  check)
    # One FA4 call (d 128, 4k keys, causal) against cuDNN, with its import and first-call times.
    eval "$("$SELF" env)"
    python3 - <<'PY'
import time, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
t0 = time.time(); from flash_attn.cute import flash_attn_func; t1 = time.time()
q, k, v = (torch.randn(4, 4096, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = flash_attn_func(q, k, v, causal=True); out = out[0] if isinstance(out, tuple) else out
torch.cuda.synchronize(); t2 = time.time()
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    ref = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True).transpose(1, 2)
print(f"FA4: import {t1 - t0:.2f} s, first call {t2 - t1:.2f} s, max |FA4 - cuDNN| {(out.float() - ref.float()).abs().max().item():.4f}")
PY
    ;;
  sass)
    # FA4's own kernels' SASS for the shapes named ("d,s,causal"; default d 64 and d 256, 16k,
    # full), into $OUT/fa4-<d>-<s>-<causal>.sass: the DSL keeps each cubin it builds.
    eval "$("$SELF" env)"
    shift
    shapes=${*:-64,16384,0 256,16384,0}
    call=$(peer_call_script)
    trap 'rm -f "$call"' EXIT
    for shape in $shapes; do
      IFS=, read -r d s c <<< "$shape"
      dump=$(mktemp -d)
      CUTE_DSL_KEEP_CUBIN=1 CUTE_DSL_DUMP_DIR=$dump python3 "$call" fa4 "$d" "$s" "$c" 1
      for f in $(find "$dump" -name '*.cubin'); do
        cuobjdump --dump-resource-usage "$f" | grep -E "Function|REG" | head -4
        cuobjdump --dump-sass "$f" > "${OUT:-/tmp}/fa4-$d-$s-$c.sass"
      done
      rm -rf "$dump"
    done
    ls -la "${OUT:-/tmp}"/fa4-*.sass
    ;;
  profile)
    # Nsight Compute on FA4's forward and on fa4gen's (the staged bench_fwd), and with
    # PROFILE_WHO naming it on cuDNN's (torch SDPA), at the #4 matrix's shape ("d,s,causal";
    # default d 64 16k full): gpu-check.sh profile's speed-of-light, workload, warp-state and
    # scheduler sections plus the pipes' utilisation, into $OUT/ncu-<who>-<d>_<s>_<causal>*.
    # The peers' third launch is the one profiled (FA4's first call compiles, cuDNN's builds its
    # plan). A failed profile is reported and the next one runs.
    eval "$("$SELF" env)"
    shift
    out=${OUT:-/tmp}
    metrics=sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second
    call=$(peer_call_script) failed=0
    trap 'rm -f "$call"' EXIT
    for shape in ${*:-64,16384,0}; do
      IFS=, read -r d s c <<< "$shape"
      tag="$d"_"$s"_"$c"
      for who in ${PROFILE_WHO:-fa4 fa4gen}; do
        rep="$out/ncu-$who-$tag"
        # What each profiles: its program and the kernel name that picks its forward out.
        case "$who" in
          fa4) prog=(python3 "$call" fa4 "$d" "$s" "$c" 4) kernel='[Ff]lash|[Ff]wd' skip=2 ;;
          # cuDNN's fused kernel is the one named for its fprop (torch's own kernels are not).
          cudnn) prog=(python3 "$call" cudnn "$d" "$s" "$c" 4) kernel='cudnn|fprop|sdpa' skip=2 ;;
          fa4gen) prog=(.stage/bin/bench_fwd .stage/generated --one "$shape") kernel=fwd skip=0 ;;
          *) echo "PROFILE_WHO: unknown '$who' (fa4, fa4gen, cudnn)" >&2; failed=1; continue ;;
        esac
        ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
            --metrics "$metrics" -k regex:"$kernel" --launch-skip "$skip" -c 1 -f -o "$rep" "${prog[@]}" > "$rep.log" 2>&1 && rc=0 || rc=$?
        echo "ncu $who $shape: rc=$rc"
        [ "$rc" = 0 ] && [ -f "$rep.ncu-rep" ] || { tail -20 "$rep.log"; failed=1; continue; }
        ncu -i "$rep.ncu-rep" --page details > "$rep.txt" 2>&1 || true
        ncu -i "$rep.ncu-rep" --page raw --csv > "$rep-raw.csv" 2>/dev/null || true
        grep -E "Kernel Name|^  [a-zA-Z_].*\(|SM Frequency|Duration|Executed Ipc Active|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" "$rep.txt" | head -12 || true
        python3 scripts/ncu_stalls.py < "$rep-raw.csv" | tee "$rep-stalls.txt" | head -8 || true
        python3 - "$rep-raw.csv" <<'PY' || true
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
want = ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active",
        "smsp__issue_active.avg.pct_of_peak_sustained_active", "sm__inst_executed.sum",
        "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "launch__grid_size")
for n, v in zip(rows[0], rows[-1]):
    if n in want:
        print(f"  {n} = {v}")
PY
        rm -f "$rep.ncu-rep"
      done
    done
    exit $failed
    ;;
  env)
    # (The DSL's .pth, which pip would have run, puts dsl_packages on the path.)
    echo "export PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages\${PYTHONPATH:+:\$PYTHONPATH}"
    ;;
  *)
    sed -n '2,12p' "$SELF"; exit 2
    ;;
esac
