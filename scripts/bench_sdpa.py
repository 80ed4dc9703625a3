#!/usr/bin/env python3
"""Time torch SDPA (cuDNN and flash backends) on the shapes bench_fwd times, the same way:
bf16, B*S = 16k tokens, H*d = 2048 (H 16 for d 192/128), random inputs rotated through enough
copies to exceed L2, median of 60 per-launch CUDA-event times after 10 warm-ups; or, with
FA4GEN_BENCH_WARM_S set, bench_fwd's sustained protocol (scripts/bench_rounds.py's `timed`).
One JSON line per (backend, shape). usage: bench_sdpa.py d,s,causal[,tile_m,tile_n] ..."""
import json
import os
import pathlib
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_rounds  # noqa: E402  (its sustained `timed`)


def shapes(args):
    if args:
        # bench_fwd's `d,s,causal[,tile_m,tile_n]`: the tile is fa4gen's; each shape once.
        seen = set()
        for a in args:
            d, s, c = a.split(",")[:3]
            shape = (int(d), int(s), c == "1")
            if shape not in seen:
                seen.add(shape)
                yield shape
        return
    for d in (64, 128, 256, 192):
        for s in (512, 1024, 4096, 16384):
            for c in (False, True):
                yield d, s, c


def main():
    warm_s = float(os.environ.get("FA4GEN_BENCH_WARM_S", "0") or 0)
    window_s = float(os.environ.get("FA4GEN_BENCH_WINDOW_S", "0.5"))
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    for d, s, causal in shapes(sys.argv[1:]):
        dv = 128 if d == 192 else d
        b = max(16384 // s, 1)
        h = 16 if d == 192 else 2048 // d
        set_bytes = 2 * b * s * h * (2 * d + 2 * dv)
        copies = max(1, min(8, -(-3 * l2 // set_bytes)))
        sets = [
            (
                torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16),
                torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16),
                torch.randn(b, h, s, dv, device=dev, dtype=torch.bfloat16),
            )
            for _ in range(copies)
        ]
        flops = 2 * b * h * s * s * (d + dv) / (2 if causal else 1)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel([backend]):
                    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
                    if warm_s > 0:
                        ms = bench_rounds.timed(fn, sets, warm_s, window_s)[0]
                    else:
                        for i in range(10):
                            fn(*sets[i % copies])
                        torch.cuda.synchronize()
                        times = []
                        for i in range(60):
                            q, k, v = sets[i % copies]
                            st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            st.record()
                            fn(q, k, v)
                            en.record()
                            en.synchronize()
                            times.append(st.elapsed_time(en))
                        times.sort()
                        ms = times[len(times) // 2]
                print(json.dumps({"impl": name, "d": d, "dv": dv, "s": s, "b": b, "h": h, "causal": causal,
                                  "ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 1)}), flush=True)
            except Exception as e:  # a backend that refuses a shape (flash at d 192/128)
                print(json.dumps({"impl": name, "d": d, "s": s, "causal": causal, "error": str(e)[:120]}), flush=True)


if __name__ == "__main__":
    main()
