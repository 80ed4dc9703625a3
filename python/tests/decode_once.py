#!/usr/bin/env python3
"""One decode step through fa4gen and through SDPA's cuDNN backend on the same tensors: what
Nsight Compute profiles to compare the two main kernels, e.g.

  ncu --section SpeedOfLight --section MemoryWorkloadAnalysis -k regex:'split$|cudnn_generated' \\
      -c 2 python3 python/tests/decode_once.py 1 131072

usage: decode_once.py [B] [Sk] [H] [Hkv] [d]   (defaults 1 131072 32 8 128; causal, bf16, Sq 1, split heuristic;
       FA4GEN_LIB / FA4GEN_KERNELS / FA4GEN_JIT as usual, TILE_MN="16,128" forces fa4gen's tile)."""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import fa4gen  # noqa: E402


def main():
    b, sk, h, hkv, d = ([int(x) for x in sys.argv[1:6]] + [1, 131072, 32, 8, 128][len(sys.argv[1:6]):])
    tile_mn = tuple(int(x) for x in os.environ["TILE_MN"].split(",")) if os.environ.get("TILE_MN") else None
    dev = torch.device("cuda")
    q = torch.randn(b, 1, h, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(b, sk, hkv, d, device=dev, dtype=torch.bfloat16)
    # No warm-up: Nsight Compute replays each profiled kernel with its caches flushed.
    fa4gen.flash_attn_func(q, k, v, causal=True, tile_mn=tile_mn, num_splits=0)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True)
    torch.cuda.synchronize()
    print("kernel:", fa4gen.kernel_name(q, k, v, causal=True, tile_mn=tile_mn, num_splits=0))


if __name__ == "__main__":
    with torch.no_grad():
        main()
