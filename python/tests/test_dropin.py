#!/usr/bin/env python3
"""The PyTorch drop-in against torch's reference by FA4's oracle, on the GPU.

Random cases (fresh inputs each), outputs poisoned with NaN; reference in float64 on the GPU
(out_ref) and in the input dtype with the scale folded into K (out_pt, FA4's reorder_ops).
Pass iff max|out - ref| <= 2 * max|pt - ref| + 2 * (rounding error of ref + 0.3 - 0.3), LSE
within 1e-3 relative. Then bad inputs: each must raise before anything runs.
usage: test_dropin.py [n_cases]   (FA4GEN_LIB, FA4GEN_KERNELS as for the package)"""
import ctypes
import math
import random
import sys
import time

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import fa4gen  # noqa: E402


def visible(sq, sk, causal, window, device):
    i = torch.arange(sq, device=device).unsqueeze(1) + (sk - sq)
    j = torch.arange(sk, device=device).unsqueeze(0)
    wl, wr = window
    if causal:
        wr = 0
    if wl is not None and wr is not None and wl + wr < 0:
        wl = wr = None
    m = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if wr is not None:
        m &= j <= i + wr
    if wl is not None:
        m &= j >= i - wl
    return m


def reference(q, k, v, scale, causal, window, upcast):
    g = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(g, dim=2)
    v = v.repeat_interleave(g, dim=2)
    vis = visible(q.shape[1], k.shape[1], causal, window, q.device)
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
        s = torch.einsum("bthd,bshd->bhts", q, k) * scale
    else:
        s = torch.einsum("bthd,bshd->bhts", q, k * scale)
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s.double(), dim=-1) if upcast else None
    p = torch.softmax(s, dim=-1).to(v.dtype)
    p = p.masked_fill(~vis.any(-1, keepdim=True), 0.0)  # rows that see nothing: 0
    out = torch.einsum("bhts,bshd->bthd", p, v)
    return out, lse


def run_case(rng, device):
    d, dv = rng.choice([(64, 64), (96, 96), (128, 128), (192, 128), (256, 256), (64, 64), (128, 128)])
    dtype = rng.choice([torch.bfloat16, torch.float16])
    sizes = [1, 3, 7, 64, 113, 128, 239, 512, 1000, 1024, 2049]
    sq, sk = rng.choice(sizes), rng.choice(sizes)
    g = rng.choice([1, 2, 3, 6, 8])
    hkv = rng.choice([1, 2])
    b = rng.choice([1, 2, 3]) if sq * sk < 300_000 else 1
    kind = rng.choice(["none", "causal", "window", "left", "right"])
    causal = kind == "causal"
    window = {"none": (None, None), "causal": (None, None),
              "window": (rng.randrange(0, sk + 1), rng.randrange(0, sk + 1)),
              "left": (rng.randrange(-sk // 2 - 1, sk + 1), None),
              "right": (None, rng.randrange(-sk // 2 - 1, sk + 1))}[kind]
    pack = rng.choice([None, None, False]) if g > 1 else None
    want_lse = rng.random() < 0.6
    scale = rng.choice([None, 0.5 / math.sqrt(d)])
    q = torch.randn(b, sq, g * hkv, d, device=device, dtype=dtype)
    k = torch.randn(b, sk, hkv, d, device=device, dtype=dtype)
    v = torch.randn(b, sk, hkv, dv, device=device, dtype=dtype)
    if rng.random() < 0.2:  # strided (padded rows) q
        q = torch.randn(b, sq, g * hkv, d + 8, device=device, dtype=dtype)[..., :d]
    out = torch.full((b, sq, g * hkv, dv), float("nan"), device=device, dtype=dtype)
    lse = torch.full((b, g * hkv, sq), float("nan"), device=device, dtype=torch.float32) if want_lse else None
    o, l = fa4gen.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, window_size=window, pack_gqa=pack,
                                  return_lse=want_lse, out=out, lse=lse)
    s = scale if scale is not None else 1 / math.sqrt(d)
    ref, ref_lse = reference(q, k, v, s, causal, window, upcast=True)
    pt, _ = reference(q, k, v, s, causal, window, upcast=False)
    ref16 = ref.to(dtype)
    err = (o.double() - ref16.double()).abs().max().item() if o.numel() else 0.0
    pt_err = (pt.double() - ref16.double()).abs().max().item() if o.numel() else 0.0
    atol = 2 * ((ref16 + 0.3 - 0.3) - ref16).abs().max().item() if o.numel() else 0.0
    name = f"{dtype} d{d}x{dv} B{b} Sq{sq} Sk{sk} H{g*hkv}/{hkv} {kind}{window} pack={pack} lse={want_lse} scale={scale}"
    if o.numel() and not torch.isfinite(o).all():
        return name, "non-finite output (unwritten or NaN)", 0
    if err > 2 * pt_err + atol:
        return name, f"max|out-ref| {err:.3e} > {2 * pt_err + atol:.3e}", 0
    if want_lse and l.numel():
        r = ref_lse
        fin = torch.isfinite(r)
        if not torch.equal(torch.isneginf(l.double()), ~fin):
            return name, "lse -inf pattern differs from the reference", 0
        rel = ((l.double() - r).abs() / r.abs().clamp(min=1))[fin].max().item() if fin.any() else 0.0
        if rel > 1e-3:
            return name, f"lse relative error {rel:.2e}", 0
    return name, None, err / max(2 * pt_err + atol, 1e-30)


def bad_inputs(device):
    """Each must raise a precise error and launch nothing."""
    bf, q = torch.bfloat16, torch.randn(1, 16, 4, 64, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, 16, 2, 64, device=device, dtype=bf)
    cases = [
        ("3-d q", lambda: fa4gen.flash_attn_func(q[0], k, k), ValueError),
        ("cpu tensor", lambda: fa4gen.flash_attn_func(q.cpu(), k, k), ValueError),
        ("float32", lambda: fa4gen.flash_attn_func(q.float(), k.float(), k.float()), ValueError),
        ("mixed dtypes", lambda: fa4gen.flash_attn_func(q, k.half(), k), ValueError),
        ("batch mismatch", lambda: fa4gen.flash_attn_func(q, torch.cat([k, k]), torch.cat([k, k])), ValueError),
        ("H % Hkv", lambda: fa4gen.flash_attn_func(q, k[:, :, :1].expand(1, 16, 3, 64).contiguous(),
                                                   k[:, :, :1].expand(1, 16, 3, 64).contiguous()), ValueError),
        ("head dim mismatch", lambda: fa4gen.flash_attn_func(q, k[..., :32].contiguous(), k), ValueError),
        ("head dim 72+4", lambda: fa4gen.flash_attn_func(torch.randn(1, 4, 2, 76, device=device, dtype=bf),
                                                         torch.randn(1, 4, 2, 76, device=device, dtype=bf),
                                                         torch.randn(1, 4, 2, 76, device=device, dtype=bf)), ValueError),
        ("head dim 512", lambda: fa4gen.flash_attn_func(torch.randn(1, 4, 2, 512, device=device, dtype=bf),
                                                        torch.randn(1, 4, 2, 512, device=device, dtype=bf),
                                                        torch.randn(1, 4, 2, 512, device=device, dtype=bf)), ValueError),
        ("k/v seqlen mismatch", lambda: fa4gen.flash_attn_func(q, k, k[:, :8]), ValueError),
        ("negative scale", lambda: fa4gen.flash_attn_func(q, k, k, softmax_scale=float("nan")), ValueError),
        ("softcap", lambda: fa4gen.flash_attn_func(q, k, k, softcap=15.0), NotImplementedError),
        ("sink", lambda: fa4gen.flash_attn_func(q, k, k, learnable_sink=torch.zeros(4, device=device)), NotImplementedError),
        ("num_splits 3", lambda: fa4gen.flash_attn_func(q, k, k, num_splits=3), NotImplementedError),
        ("score_mod", lambda: fa4gen.flash_attn_func(q, k, k, score_mod=lambda *a: a), NotImplementedError),
        ("varlen", lambda: fa4gen.flash_attn_varlen_func(q, k, k), NotImplementedError),
        ("requires grad", lambda: fa4gen.flash_attn_func(q.clone().requires_grad_(), k, k), NotImplementedError),
        ("out wrong shape", lambda: fa4gen.flash_attn_func(q, k, k, out=torch.empty(1, 16, 4, 32, device=device, dtype=bf)), ValueError),
        ("lse wrong dtype", lambda: fa4gen.flash_attn_func(q, k, k, return_lse=True,
                                                           lse=torch.empty(1, 4, 16, device=device, dtype=bf)), ValueError),
    ]
    failures = []
    for name, f, exc in cases:
        try:
            f()
            failures.append(f"{name}: no error")
        except exc as e:
            if not str(e):
                failures.append(f"{name}: empty message")
        except Exception as e:  # noqa: BLE001
            failures.append(f"{name}: {type(e).__name__} instead of {exc.__name__}: {e}")
    # The C ABI itself: misaligned pointer and null lse, refused before launch.
    lib = fa4gen._load()
    h = fa4gen._handle(q.device)
    out = torch.empty(1, 16, 4, 64, device=device, dtype=bf)
    p = fa4gen._problem(q, k, k, out.stride(), None, False, (None, None), None, True, 1)
    for name, args, want in [
        ("misaligned q", (q.data_ptr() + 2, k.data_ptr(), k.data_ptr(), out.data_ptr(), 0), fa4gen.INVALID_ARGUMENT),
        ("null lse with return_lse", (q.data_ptr(), k.data_ptr(), k.data_ptr(), out.data_ptr(), None), fa4gen.INVALID_ARGUMENT),
        ("null out", (q.data_ptr(), k.data_ptr(), k.data_ptr(), None, 0), fa4gen.INVALID_ARGUMENT),
    ]:
        st = lib.fa4gen_forward(h, ctypes.byref(p), *args, None)
        if st != want:
            failures.append(f"C ABI {name}: status {st}, want {want}")
    return len(cases) + 3, failures


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 240
    device = torch.device("cuda")
    seed = int(time.time())
    rng = random.Random(seed)
    torch.manual_seed(seed)
    failures, worst = [], 0.0
    t = time.time()
    with torch.no_grad():
        for _ in range(n):
            name, why, ratio = run_case(rng, device)
            worst = max(worst, ratio)
            if why:
                failures.append(f"{name}: {why}")
    torch.cuda.synchronize()
    print(f"drop-in oracle: {n - len(failures)} passed, {len(failures)} failed of {n} random cases "
          f"(seed {seed}); worst err/bound {worst:.3f}; {time.time() - t:.1f} s")
    for f in failures:
        print("FAIL", f)
    nbad, bad_fail = bad_inputs(device)
    print(f"drop-in bad inputs: {nbad - len(bad_fail)} of {nbad} refused precisely")
    for f in bad_fail:
        print("FAIL", f)
    sys.exit(1 if failures or bad_fail else 0)


if __name__ == "__main__":
    main()
