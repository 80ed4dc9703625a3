#!/usr/bin/env bash
# The GPU host's jit compiles kernels with its own NVRTC (CUDA 13.0), older than the 13.5 that
# builds the library here; a template construct 13.0 rejects breaks every kernel the jit builds
# there (generic lambdas in device code did, in the seventeenth session: the first GPU run's
# jit-built tiles all failed). This compiles one kernel per template path with NVRTC 13.0 from
# PyPI, installed on first use into .nvrtc130 (ignored). STEMS overrides the list.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.nvrtc130
if [ ! -e "$dir/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  python3 -m pip download --no-deps --quiet "nvidia-cuda-nvrtc==13.0.88" -d "$dir/wheel"
  python3 -m zipfile -e "$dir"/wheel/nvidia_cuda_nvrtc-*.whl "$dir"
fi
lib=$(cd "$dir/nvidia/cu13/lib" && pwd)
cargo build --example compile_one -q
default_stems="
fwd.sm90.wgmma.bf16.d128x128.m128n128.q1
fwd.sm90.wgmma.bf16.d128x128.m128n160.q1.causal.lse
fwd.sm90.wgmma.bf16.d192x128.m128n128.q1.causal
fwd.sm90.wgmma.bf16.d256x256.m128n80.q1.lse
fwd.sm90.wgmma.bf16.d64x64.m192n128.q1.local.lse.packgqa.varlen.paged.sink
fwd.sm90.wgmma.fp16.d64x64.m64n128.q1.packgqa
fwd.sm90.portable.bf16.d128x128.m128n64.q1.causal.lse
fwd.sm90.portable.bf16.d64x64.m128n64.q1.local.lse.packgqa.varlen.paged.sink.softcap.split
"
status=0
for stem in ${STEMS:-$default_stems}; do
  out=$(LD_LIBRARY_PATH="$lib" FA4GEN_NVRTC="$lib" target/debug/examples/compile_one "$stem" 2>&1) || true
  if grep -q "nvrtc (13, 0)" <<< "$out" && grep -q " bytes, " <<< "$out"; then
    echo "NVRTC 13.0 ok   $stem"
  else
    echo "NVRTC 13.0 FAIL $stem"
    grep -E "error|nvrtc" <<< "$out" | head -8
    status=1
  fi
done
exit $status
