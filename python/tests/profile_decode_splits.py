#!/usr/bin/env python3
"""Where a decode step's time goes with counts per sequence: the GPU time of the split kernel
and its combine (torch.profiler over eager calls, profile_decode's method) for the steps of
bench_serving's decode-batches, with each sequence's own count (`shares` waves of units), FA4's
one count (shares 0), and one count by hand, beside each variant's CUDA-graph time.

usage: profile_decode_splits.py [step name substring ...]   (FA4GEN_LIB / FA4GEN_KERNELS /
       FA4GEN_JIT as usual; VARIANTS="0:4 0:0 4:0" the (num_splits, shares) pairs, num_splits 0
       the heuristic's). One JSON line per (step, variant)."""
import json
import os
import sys

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from bench_serving import BF, DECODE_BATCHES, DEV, engine_pages, graph_time_ms, warm_up_clocks  # noqa: E402
from profile_decode import kernels_us  # noqa: E402

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import fa4gen  # noqa: E402


def main():
    warm_up_clocks()
    variants = [tuple(int(x) for x in v.split(":")) for v in os.environ.get("VARIANTS", "0:4 0:0 4:0").split()]
    for name, h, hkv, d, sinks, sks in DECODE_BATCHES:
        if sys.argv[1:] and not any(a in name for a in sys.argv[1:]):
            continue
        b = len(sks)
        table, k, v = engine_pages(sks, hkv, d)
        q = torch.randn(b, h, d, device=DEV, dtype=BF)
        kw = dict(cu_seqlens_q=torch.arange(b + 1, device=DEV, dtype=torch.int32), max_seqlen_q=1,
                  max_seqlen_k=max(sks), seqused_k=torch.tensor(sks, device=DEV, dtype=torch.int32),
                  page_table=table, causal=True,
                  learnable_sink=torch.randn(h, device=DEV, dtype=torch.float32) if sinks else None)
        for splits, shares in variants:
            fa4gen.set_sequence_splits(shares)

            def call(i, splits=splits):
                return fa4gen.flash_attn_varlen_func(q, k, v, num_splits=splits, **kw)
            print(json.dumps(dict(step=name, splits=splits, shares=shares,
                                  graph_us=round(graph_time_ms(call, 1) * 1e3, 2),
                                  kernels_us=kernels_us(call, 1))), flush=True)
        fa4gen.set_sequence_splits(4)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
