#!/usr/bin/env python3
"""Where a small-batch decode step's time goes: the GPU time of each kernel a call launches
(torch.profiler over eager calls) beside the call's CUDA-graph time (bench_serving's method),
for fa4gen at several split counts and for SDPA's cuDNN and flash backends on the same tensors.
The graph time minus the kernels' sum is what the launches between them cost (fa4gen's combine
launches as the split kernel's programmatic dependent and starts early: its time overlaps).

usage: profile_decode.py [shape label substring ...]   (FA4GEN_LIB / FA4GEN_KERNELS / FA4GEN_JIT as usual;
       SPLITS="0 1 2 4 8 16 32" the split counts tried, 0 = the heuristic; TILE_MN="16,128" forces
       fa4gen's tile, as FA4's tile_mn). One JSON line per row."""
import json
import os
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from bench_serving import BF, DEV, copies_for, graph_time_ms, warm_up_clocks  # noqa: E402

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import fa4gen  # noqa: E402

CALLS = 40


def kernels_us(fn, n):
    """Mean GPU µs per call of each kernel fn launches, by kernel name (eager calls)."""
    for i in range(3):
        fn(i % n)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(CALLS):
            fn(i % n)
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name if len(e.name) <= 70 else e.name[:30] + "…" + e.name[-39:]
            per[name] += e.device_time / CALLS
    return {k: round(v, 2) for k, v in sorted(per.items(), key=lambda kv: -kv[1])}


def shapes():
    # (label, B, Sk, H, Hkv, d, sinks)
    yield "llama d128 4k", 1, 4096, 32, 8, 128, False
    yield "llama d128 32k", 1, 32768, 32, 8, 128, False
    yield "llama d128 128k", 1, 131072, 32, 8, 128, False
    yield "llama d128 4k B8", 8, 4096, 32, 8, 128, False
    yield "gemma-3 window slice d256 1k", 1, 1024, 16, 8, 256, False
    yield "gpt-oss window slice d64 128", 1, 128, 64, 8, 64, True


def main():
    warm_up_clocks()
    splits_tried = [int(x) for x in os.environ.get("SPLITS", "0 1 2 4 8 16 32").split()]
    tile_mn = tuple(int(x) for x in os.environ["TILE_MN"].split(",")) if os.environ.get("TILE_MN") else None
    for label, b, sk, h, hkv, d, sink in shapes():
        if sys.argv[1:] and not any(a in label for a in sys.argv[1:]):
            continue
        n = copies_for(2 * b * sk * hkv * d * 2)
        qs = [torch.randn(b, 1, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        sinks = torch.randn(h, device=DEV) if sink else None
        for splits in splits_tried:
            def call(i, splits=splits):
                return fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True, learnable_sink=sinks,
                                              num_splits=splits, tile_mn=tile_mn)
            try:
                graph_us = graph_time_ms(call, n) * 1e3
            except Exception as e:  # noqa: BLE001
                print(json.dumps(dict(shape=label, impl="fa4gen", splits=splits, error=str(e)[:200])), flush=True)
                continue
            name = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=True, learnable_sink=sinks, num_splits=splits,
                                      tile_mn=tile_mn)
            print(json.dumps(dict(shape=label, impl="fa4gen", splits=splits, kernel=name, graph_us=round(graph_us, 2),
                                  kernels_us=kernels_us(call, n))), flush=True)
        for peer, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            def sdpa(i, backend=backend):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(qs[i].transpose(1, 2), ks[i].transpose(1, 2),
                                                          vs[i].transpose(1, 2), enable_gqa=True)
            try:
                graph_us = graph_time_ms(sdpa, n) * 1e3
                print(json.dumps(dict(shape=label, impl=peer, graph_us=round(graph_us, 2),
                                      kernels_us=kernels_us(sdpa, n))), flush=True)
            except Exception as e:  # noqa: BLE001
                print(json.dumps(dict(shape=label, impl=peer, error=str(e)[:200])), flush=True)
        del qs, ks, vs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    with torch.no_grad():
        main()
