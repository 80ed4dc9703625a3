#!/usr/bin/env python3
"""Programmatic dependent launch on and off, paired in one process: for each shape, two CUDA
graphs of CALLS back-to-back fa4gen calls are captured, one with the handle's programmatic
launch on and one with it off (fa4gen_set_programmatic_launch), then replayed alternately
ROUNDS times; medians of the per-call times and the median of the paired ratios are printed,
one JSON line per shape. Inputs rotate through enough copies to exceed L2.

usage: FA4GEN_LIB=... FA4GEN_KERNELS=... [FA4GEN_JIT=1] pdl_ab.py"""
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fa4gen  # noqa: E402
from bench_serving import capture_graph  # noqa: E402

DEV, BF = "cuda", torch.bfloat16
L2 = torch.cuda.get_device_properties(0).L2_cache_size
CALLS, ROUNDS = int(os.environ.get("CALLS", "20")), int(os.environ.get("ROUNDS", "40"))


def timed(g):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / CALLS  # us per call


def shape(name, b, sq, sk, h, hkv, d, **kw):
    n = max(1, min(8, -(-3 * L2 // (2 * b * (sq * h + 2 * sk * hkv) * d))))
    qs = [torch.randn(b, sq, h, d, device=DEV, dtype=BF) for _ in range(n)]
    ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
    vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
    fn = lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], **kw)  # noqa: E731
    fa4gen.set_programmatic_launch(True)
    g_on = capture_graph(fn, n, CALLS)
    fa4gen.set_programmatic_launch(False)
    g_off = capture_graph(fn, n, CALLS)
    fa4gen.set_programmatic_launch(True)
    on, off, ratio = [], [], []
    for r in range(ROUNDS):
        pair = (g_on, g_off) if r % 2 == 0 else (g_off, g_on)
        t = [timed(g) for g in pair]
        t_on, t_off = (t[0], t[1]) if r % 2 == 0 else (t[1], t[0])
        on.append(t_on)
        off.append(t_off)
        ratio.append(t_off / t_on)
    print(json.dumps({"shape": name, "kernel": fa4gen.kernel_name(qs[0], ks[0], vs[0], **kw),
                      "us_pdl": round(statistics.median(on), 2), "us_plain": round(statistics.median(off), 2),
                      "plain_over_pdl": round(statistics.median(ratio), 4),
                      "ratio_q1_q3": [round(x, 4) for x in statistics.quantiles(ratio, n=4)[::2]]}), flush=True)


def main():
    with torch.no_grad():
        sinks = torch.randn(64, device=DEV)
        shape("decode B1 4k (split)", 1, 1, 4096, 32, 8, 128, causal=True, num_splits=0)
        shape("decode B8 4k (split)", 8, 1, 4096, 32, 8, 128, causal=True, num_splits=0)
        shape("window 128 S16k G8 d64", 1, 16384, 16384, 32, 4, 64, causal=True, window_size=(127, 0))
        shape("gpt-oss sliding B4 S4k", 4, 4096, 4096, 64, 8, 64, causal=True, window_size=(127, 0), learnable_sink=sinks)
        shape("d128 1k causal B16", 16, 1024, 1024, 16, 16, 128, causal=True)
        shape("d128 512 full B32", 32, 512, 512, 16, 16, 128)
        shape("d128 16k causal (long: plain by rule)", 1, 16384, 16384, 16, 16, 128, causal=True)


if __name__ == "__main__":
    main()
