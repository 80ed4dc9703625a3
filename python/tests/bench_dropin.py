#!/usr/bin/env python3
"""fa4gen's PyTorch drop-in beside torch SDPA (cuDNN and flash backends) on the same tensors:
q, k, v are allocated once as (B, S, H, D); SDPA gets their (B, H, S, D) transposed views.
bf16, B*S = 16k, H*d = 2048, median of 50 event-timed calls after 10 warm-ups. Also the host
cost of one call (tiny problem, no sync in the timed loop) for fa4gen and SDPA.
Prints JSON lines. usage: bench_dropin.py [d,s,causal ...]"""
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import fa4gen  # noqa: E402


def timed(fn, iters=50, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def host_us(fn, n=2000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(n):
        fn()
        if i % 256 == 255:
            torch.cuda.synchronize()  # keep the launch queue from filling
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    print(json.dumps({"env": {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                              "gpu": torch.cuda.get_device_name()}}), flush=True)
    args = sys.argv[1:] or [f"{d},{s},{c}" for d in (64, 128, 256) for s in (1024, 4096) for c in (0, 1)]
    with torch.no_grad():
        for a in args:
            d, s, c = (int(x) for x in a.split(","))
            dv = 128 if d == 192 else d
            b, h = max(16384 // s, 1), (16 if d == 192 else 2048 // d)
            q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, s, h, dv, device="cuda", dtype=torch.bfloat16)
            flops = 2 * b * h * s * s * (d + dv) / (2 if c else 1)
            row = {"d": d, "s": s, "causal": bool(c), "b": b, "h": h}
            ms = timed(lambda: fa4gen.flash_attn_func(q, k, v, causal=bool(c)))
            row["fa4gen"] = round(flops / ms / 1e9, 1)
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel([be]):
                        ms = timed(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(c)))
                    row[name] = round(flops / ms / 1e9, 1)
                except RuntimeError:
                    row[name] = None
            print(json.dumps(row), flush=True)
        q = torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16)
        qt = q.transpose(1, 2)
        ours = host_us(lambda: fa4gen.flash_attn_func(q, q, q, causal=True))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            sdpa = host_us(lambda: F.scaled_dot_product_attention(qt, qt, qt, is_causal=True))
        print(json.dumps({"host_us_per_call": {"fa4gen_python": round(ours, 2), "sdpa_flash": round(sdpa, 2),
                                               "shape": "B1 S128 H2 d64 causal"}}), flush=True)


if __name__ == "__main__":
    main()
