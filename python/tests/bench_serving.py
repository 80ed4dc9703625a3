#!/usr/bin/env python3
"""Serving-shape benchmarks (issues #5 and #6) through the PyTorch drop-in, beside torch SDPA on
the same tensors in the same run. Every timed call is captured in a CUDA graph (a batch of
calls per graph, inputs rotated through enough copies to exceed L2), so the figures are GPU
time, not Python launch overhead; medians of the replays after warm-up. One JSON line per row.

  gpt-oss    gpt-oss-20b prefill, B*S = 16k, d64, H64/Hkv8, sinks; full (causal) and sliding
             (window 128) layers; beside them FlexAttention on both masks (GQA, no sinks) and SDPA
             causal on K/V repeated to 64 heads (no sinks)
  window     window 128 at S = 16k: time vs the unmasked kernel scaled to the visited blocks, vs the
             window tile unmasked over the same blocks (a tile's span of keys: jit-compiles it where
             no plan ships it, FA4GEN_JIT=1), and FlexAttention (block-sparse) on the same window;
             head dims in $WINDOW_D (64: H 64/8; 128, 256, 192 at H * d = 4096, GQA 8)
  short-keys  (only when named) unmasked calls over 1..205 blocks of keys, and windows 128..4k, against
             the long call's rate per visited block: #5's window metric as a function of blocks per tile
  window-tiles  (only when named) d 64 windows of $WINDOW_TILES_W keys on each candidate tile and the selected one
  window-l2  (only when named) the window 128 tile on inputs L2 holds against inputs rotated past it, at
             S 1k..3k and 16k (H 32/4): how much of the window tile's time is DRAM's
  varlen     16 sequences of 64..4k tokens, packed, vs the same batch padded to dense
  paged      prefill with a prefix cache from pages of 128 and 16 vs contiguous K/V
  pack-gqa   GQA packed vs unpacked (pack_gqa=True / False) on gpt-oss- and Llama-like shapes
             and short query chunks over a long cache, with the kernel the default takes
  decode     Sq = 1, d128, H32/Hkv8, B in {1, 8, 64}, Sk in {4k, 32k, 128k}, contiguous and
             page 128: split-KV (heuristic) and unsplit, as KV bandwidth, beside SDPA; plus a
             check that a captured decode step replays to the eager result bit for bit
  decode-unsplit  unsplit decode steps (num_splits=1) on few CTAs, d 64 / 128 / 256, B 1..32, contiguous
             and pages of 16 / 128 (d 64 and 128), Sk in $DECODE_UNSPLIT_SK (4096 32768), head dims in
             $DECODE_UNSPLIT_D (all): GB/s and the kernel taken, outputs checked against fp32 up to 4k keys
  decode-rows  unsplit steps of a few query rows: MHA with 1..64 queries (speculative decoding), B 1 and
             4, and GQA 8 with 8 queries, B 1 and 8; d 128, Sk in $DECODE_UNSPLIT_SK: GB/s and the kernel
  window-decode  sliding-window decode steps (gpt-oss d64 window 128, Gemma-3 d256 window 1024),
             B in {1, 8, 64}, Sk in {4133, 32771}, contiguous and pages of 16 / 128, beside the same call
             on the window's keys sliced out (fa4gen dense, SDPA)
  chunked    query chunks (32..1k) over long caches (4k..32k): the flagship unsplit (the default,
             num_splits=1) against the split heuristic (num_splits=0) and explicit splits (2, 4, 8),
             on sm90 the flagship's own split-KV
  chunked-paged  the same over pages of 16 and 128 keys: the default (fill tile), 128x128, the heuristic
  few-tiles  prefill (Sq = Sk 512..4k) on a few heads (tensor-parallel shards): unsplit, the heuristic, 2, 4
  engine-chunks  one sequence's chunk through flash_attn_varlen_func over pages of 16 (gpt-oss, Llama-like):
             unsplit, the heuristic, counts by hand
  mixed-batches  an engine's step in one varlen call (a chunk beside decodes, several chunks, decodes)
             over pages of 16 behind full-width block tables: the heuristic with and without
             max_seqlen_k, counts by hand
  decode-batches  decode steps (one query per sequence, pages of 16, full-width tables) of mixed and
             equal context lengths: the heuristic's split count beside counts by hand
  split-sweep  the split count by hand (1-8) beside the heuristic's, on calls it splits or nearly
  combine    the split-KV combine's two kernels and the runtime's choice, in turns: forwards that split
             (chunked and short prefill, decode) and flash_attn_combine alone
  dense-tiles  (only when named) dense d64/d128 shapes on the flagship's other tiles

With FA4_PEER=1 (FA4 unpacked on the GPU host by scripts/fa4-peer.sh), FA4 itself runs the same
calls as fa4gen in the gpt-oss, window, varlen, paged, decode and chunked sections: the same
argument names, graph-timed the same way, its output checked against fa4gen's once per call.

usage: bench_serving.py [section ...]   (FA4GEN_LIB / FA4GEN_KERNELS / FA4GEN_JIT as usual)"""
import json
import math
import os
import random
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import fa4gen  # noqa: E402

DEV = torch.device("cuda")
BF = torch.bfloat16
L2 = torch.cuda.get_device_properties(DEV).L2_cache_size
COPY_CEILING_GBS = 4226  # device-to-device copy bandwidth measured on this H200 (issue #6)


def emit(**row):
    print(json.dumps(row), flush=True)


def copies_for(nbytes):
    return max(1, min(8, -(-3 * L2 // max(nbytes, 1))))


def capture_graph(fn, n_args, calls):
    """A CUDA graph of `calls` calls fn(i) (i selects the input copy), replayed once."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):  # warm-up: loads modules, grows workspaces, jit-compiles
            fn(i % n_args)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i % n_args)
    g.replay()
    torch.cuda.synchronize()
    return g


def graph_time_ms(fn, n_args, calls=10, replays=15, warm_ms=150.0):
    """Median GPU time per call of fn(i) (i selects the input copy), from CUDA graph replays,
    after replays for at least warm_ms. After heavier work (warm_up_clocks' matmuls, a long
    call at the power cap) the clocks take ~100 ms to climb back: session 34, d 128 causal
    S 4k H 2/1 right after warm_up_clocks read 0.0426, 0.0403, 0.0388 ms over its first three
    timings with 25 ms of these replays, and 0.0380 with 300 ms; a shape timed after a 0.17 ms
    unmasked one read 0.0414 against 0.0375 in its second round."""
    g = capture_graph(fn, n_args, calls)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    while True:
        g.replay()
        b.record()
        b.synchronize()
        if a.elapsed_time(b) >= warm_ms:
            break
    ts = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / calls)
    ts.sort()
    return ts[len(ts) // 2]


def sdpa_ms(backend, qs, ks, vs, **kw):
    """SDPA on (B, H, S, D) views of the (B, S, H, D) tensors, or None if the backend refuses."""
    try:
        with sdpa_kernel([backend]):
            return graph_time_ms(lambda i: F.scaled_dot_product_attention(
                qs[i].transpose(1, 2), ks[i].transpose(1, 2), vs[i].transpose(1, 2), **kw), len(qs))
    except Exception as e:  # noqa: BLE001
        return f"unsupported: {str(e).splitlines()[0][:120]}"


PEERS = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION))

FA4 = None
if os.environ.get("FA4_PEER") == "1":
    import flash_attn.cute as FA4  # noqa: N812


def fa4_ms(name, ours, *args, n=1, **kw):
    """FA4's `name` (flash_attn_func or flash_attn_varlen_func) on fa4gen's arguments, args[i]
    the i-th input copy: its graph time per call, or None without FA4, or its error string. Its
    output must match fa4gen's (`ours`, the first copy's) within bf16 rounding, else the time
    would compare two different computations."""
    if FA4 is None:
        return None
    fn = getattr(FA4, name)
    try:
        got = fn(*args[0], **kw)
        got = got[0] if isinstance(got, tuple) else got
        err = (got.float() - ours.float()).abs().max().item()
        if not err < 0.05:
            return f"differs from fa4gen by {err:.3g}"
        return graph_time_ms(lambda i: fn(*args[i], **kw), n)
    except Exception as e:  # noqa: BLE001
        return f"unsupported: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}"


def rounded(ms, digits=4):
    return ms if ms is None or isinstance(ms, str) else round(ms, digits)


def flex_ms(qs, ks, vs, window=None):
    """FlexAttention (torch.compile'd, Triton) on (B, H, S, D) views: causal, or a causal window of
    `window` keys, as a block mask (it skips the blocks the mask hides, as fa4gen's window tiles
    do); GQA through enable_gqa (no repeated K/V). The peer for masks SDPA cannot express: no
    sinks. Its string on failure (compilation needs Triton's toolchain on the GPU host)."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def visible(b, h, q, k):
            return (q >= k) & (q - k < window) if window else q >= k

        s_q, s_k = qs[0].shape[1], ks[0].shape[1]
        mask = create_block_mask(visible, B=None, H=None, Q_LEN=s_q, KV_LEN=s_k, device=DEV)
        flex = torch.compile(flex_attention, dynamic=False)
        return graph_time_ms(lambda i: flex(qs[i].transpose(1, 2), ks[i].transpose(1, 2), vs[i].transpose(1, 2),
                                            block_mask=mask, enable_gqa=True), len(qs))
    except Exception as e:  # noqa: BLE001
        return f"unsupported: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}"


def gpt_oss():
    b, s, h, hkv, d = 4, 4096, 64, 8, 64
    n = copies_for(2 * b * s * (h + 2 * hkv) * d)
    qs = [torch.randn(b, s, h, d, device=DEV, dtype=BF) for _ in range(n)]
    ks = [torch.randn(b, s, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
    vs = [torch.randn(b, s, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
    sinks = torch.randn(h, device=DEV)
    full_pairs = b * h * s * (s + 1) / 2
    win_pairs = b * h * sum(min(i + 1, 128) for i in range(s))
    for layer, window, pairs in (("full", (None, None), full_pairs), ("sliding", (127, 0), win_pairs)):
        ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True, window_size=window,
                                                            learnable_sink=sinks), n)
        emit(bench="gpt-oss", layer=layer, impl="fa4gen", ms=round(ms, 4),
             tflops=round(4 * pairs * d / ms / 1e9, 1), kernel=fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=True,
                                                                                  window_size=window,
                                                                                  learnable_sink=sinks))
        if FA4 is not None:
            ours = fa4gen.flash_attn_func(qs[0], ks[0], vs[0], causal=True, window_size=window, learnable_sink=sinks)[0]
            fa4 = fa4_ms("flash_attn_func", ours, *zip(qs, ks, vs), n=n, causal=True, window_size=window,
                         learnable_sink=sinks)
            emit(bench="gpt-oss", layer=layer, impl="fa4", ms=rounded(fa4),
                 tflops=None if isinstance(fa4, str) else round(4 * pairs * d / fa4 / 1e9, 1),
                 fa4gen_over_fa4=None if isinstance(fa4, str) else round(fa4 / ms, 3))
    for layer, window, pairs in (("full (no sinks)", None, full_pairs), ("sliding (no sinks)", 128, win_pairs)):
        ms = flex_ms(qs, ks, vs, window)
        emit(bench="gpt-oss", layer=layer, impl="flex-attention", ms=ms if isinstance(ms, str) else round(ms, 4),
             tflops=None if isinstance(ms, str) else round(4 * pairs * d / ms / 1e9, 1))
    kr = [k.repeat_interleave(h // hkv, dim=2) for k in ks]
    vr = [v.repeat_interleave(h // hkv, dim=2) for v in vs]
    for name, backend in PEERS:
        ms = sdpa_ms(backend, qs, kr, vr, is_causal=True)
        emit(bench="gpt-oss", layer="full (no sinks)", impl=f"sdpa-{name}", ms=ms if isinstance(ms, str) else round(ms, 4),
             tflops=None if isinstance(ms, str) else round(4 * full_pairs * d / ms / 1e9, 1))
    del qs, ks, vs, kr, vr


def window():
    # WINDOW_D ("64" by default: gpt-oss's head dim, #5's shape) picks the head dims: H * d = 4096,
    # GQA 8 (d 64: H 64/8; 128: 32/4; 256: 16/2; 192/128: 16/2). The tile sweep runs at d 64 only.
    for d in [int(x) for x in os.environ.get("WINDOW_D", "64").replace(",", " ").split()]:
        window_at(d)


def same_blocks(q, k, v, w, selected):
    """The selected window kernel's time beside its own tile unmasked over the keys one of its
    tiles visits: the same tiles, each running the same whole blocks, with no mask. Its ratio
    parts the window's own cost (masks, block placement) from what any call of such short tiles
    pays per tile (setup, schedule, epilogue), which the ratio to the long unmasked call's
    per-block rate counts in. The two are timed in turns, window first, three times each, and
    compared turn by turn: one kernel's timings in one run drift by up to 5-7% as the run goes
    on (fifty-second session: the selected window call read 0.136 ms first and 0.143 ms last;
    the fifty-first's "named tile reads slower" was most likely this drift)."""
    tm, tn, gw, stem = selected
    span = tm // gw + w - 1  # a tile's keys: its queries' windows, (w - 1, 0) bottom-right
    keys = -(-span // tn) * tn
    ks, vs = k[:, :keys].contiguous(), v[:, :keys].contiguous()
    win, ref = [], []
    try:
        for _ in range(3):
            win.append(graph_time_ms(lambda i: fa4gen.flash_attn_func(q, k, v, causal=True, window_size=(w - 1, 0)), 1))
            ref.append(graph_time_ms(lambda i: fa4gen.flash_attn_func(q, ks, vs, tile_mn=(tm, tn)), 1))
        ref_stem = fa4gen.kernel_name(q, ks, vs, tile_mn=(tm, tn))
    except Exception as e:  # noqa: BLE001
        emit(bench="window128-S16k", same_blocks_error=str(e)[:200])
        return
    ratios = sorted(a / b for a, b in zip(win, ref))
    emit(bench="window128-S16k", d=q.shape[-1], kernel=stem, ms_window_turns=[round(t, 4) for t in win],
         same_blocks_kernel=ref_stem, same_blocks_keys=keys, ms_same_blocks_turns=[round(t, 4) for t in ref],
         ratio_to_same_blocks=round(ratios[1], 3))


def tile_of(stem):
    """(tile_m, tile_n) from a kernel's stem (its sixth field, m<M>n<N>)."""
    tm, tn = (int(x) for x in stem.split(".")[5][1:].split("n"))
    return tm, tn


def window_work(s, w, g, stem):
    """The (query, key) pairs a causal window (w - 1, 0) kernel visits per query head, padded to its
    tiles and blocks as the kernel lays them: each tile's blocks from its first visible key
    (KernelSpec::window_blocks). Rows per KV head are S * G packed, S unpacked."""
    tm, tn = tile_of(stem)
    gw = g if ".packgqa" in stem else 1
    visited = 0
    for m0 in range(0, s * gw, tm):
        q0, q1 = m0 // gw, min(s, (m0 + tm - 1) // gw + 1)
        lo = max(0, q0 - (w - 1))
        visited += (q1 - lo + tn - 1) // tn
    return visited * tm * tn / gw


def dense_work(sq, sk, g, stem):
    """The padded pairs an unmasked kernel visits per query head: every tile, every block."""
    tm, tn = tile_of(stem)
    gf = g if ".packgqa" in stem else 1
    return math.ceil(sq * gf / tm) * tm * math.ceil(sk / tn) * tn / gf


def short_keys():
    """#5's window metric, taken apart: is its 1.7x the window's, or any call whose tiles run few
    blocks? Unmasked calls of gpt-oss's shape (B 1, S 16k queries, H 64/8, d 64) over the first
    Sk keys, Sk from one block to 16k, each against the long (16k-key) call's rate per visited
    block: on the window's own tile (192x80, forced: jit where no plan ships it) and on the tile
    selection takes. Then the window itself at widths 128 to 4k on the selected tile, by #5's
    metric (against the long unmasked call on its selected tile). If the unmasked short calls
    read what the window reads at the same blocks per tile, the metric measures a tile's fixed
    cost spread over few blocks, not the mask."""
    s, h, hkv, d = 16384, 64, 8, 64
    g = h // hkv
    q = torch.randn(1, s, h, d, device=DEV, dtype=BF)
    k = torch.randn(1, s, hkv, d, device=DEV, dtype=BF)
    v = torch.randn(1, s, hkv, d, device=DEV, dtype=BF)
    for tile in ((192, 80), None):
        rows = []
        for sk in (80, 160, 240, 320, 640, 1280, 2560, 5120, s):
            ks, vs = k[:, :sk].contiguous(), v[:, :sk].contiguous()
            try:
                t = graph_time_ms(lambda i: fa4gen.flash_attn_func(q, ks, vs, tile_mn=tile), 1)
            except Exception as e:  # noqa: BLE001
                emit(bench="short-keys", tile=tile, sk=sk, error=str(e)[:200])
                continue
            stem = fa4gen.kernel_name(q, ks, vs, tile_mn=tile)
            rows.append((sk, t, stem))
        if not rows or rows[-1][0] != s:
            continue
        t_long, long_stem = rows[-1][1], rows[-1][2]
        rate = t_long / dense_work(s, s, g, long_stem)
        for sk, t, stem in rows:
            emit(bench="short-keys", tile=tile, sk=sk, blocks_per_tile=math.ceil(sk / tile_of(stem)[1]),
                 ms=round(t, 4), ratio_to_long_rate=round(t / (dense_work(s, sk, g, stem) * rate), 3), kernel=stem)
    t_full = graph_time_ms(lambda i: fa4gen.flash_attn_func(q, k, v), 1)
    full_stem = fa4gen.kernel_name(q, k, v)
    for w in (128, 256, 512, 1024, 2048, 4096):
        t = graph_time_ms(lambda i: fa4gen.flash_attn_func(q, k, v, causal=True, window_size=(w - 1, 0)), 1)
        stem = fa4gen.kernel_name(q, k, v, causal=True, window_size=(w - 1, 0))
        work = window_work(s, w, g, stem) / dense_work(s, s, g, full_stem)
        tm, tn = tile_of(stem)
        span = tm // (g if ".packgqa" in stem else 1) + w - 1
        emit(bench="short-keys", window=w, blocks_per_tile=math.ceil(span / tn), ms=round(t, 4),
             ms_unmasked=round(t_full, 4), ratio_to_visited_work=round(t / (t_full * work), 3), kernel=stem)


def window_tiles():
    """Which tile a d 64 window of width w wants: gpt-oss's shape (B 1, S 16k, H 64/8, packed) under
    windows (w - 1, 0) for w in $WINDOW_TILES_W, on each candidate tile and on the one selection
    takes, in two rounds (the tiles alternate within a round). Checks `TileShape::cost`'s
    per-block overhead where tiles of different widths cost nearly the same by its count."""
    s, h, hkv, d = 16384, 64, 8, 64
    q = torch.randn(1, s, h, d, device=DEV, dtype=BF)
    k = torch.randn(1, s, hkv, d, device=DEV, dtype=BF)
    v = torch.randn(1, s, hkv, d, device=DEV, dtype=BF)
    widths = [int(x) for x in os.environ.get("WINDOW_TILES_W", "192 384 768 1536 2048 3072").split()]
    for rnd in range(2):
        for w in widths:
            for tile in (None, (192, 128), (192, 80), (192, 64)):
                call = lambda i: fa4gen.flash_attn_func(q, k, v, causal=True, window_size=(w - 1, 0), tile_mn=tile)  # noqa: E731
                try:
                    t = graph_time_ms(call, 1)
                except Exception as e:  # noqa: BLE001
                    emit(bench="window-tiles", window=w, tile=tile, error=str(e)[:200])
                    continue
                stem = fa4gen.kernel_name(q, k, v, causal=True, window_size=(w - 1, 0), tile_mn=tile)
                emit(bench="window-tiles", round=rnd, window=w, tile=tile, ms=round(t, 4), kernel=stem)


def window_at(d):
    b, s, w = 1, 16384, 128
    h = 16 if d == 192 else 4096 // d
    hkv, dv = h // 8, 128 if d == 192 else d
    q = torch.randn(b, s, h, d, device=DEV, dtype=BF)
    k = torch.randn(b, s, hkv, d, device=DEV, dtype=BF)
    v = torch.randn(b, s, hkv, dv, device=DEV, dtype=BF)
    t_full = graph_time_ms(lambda i: fa4gen.flash_attn_func(q, k, v), 1)
    full_stem = fa4gen.kernel_name(q, k, v)
    g = h // hkv
    selected = None  # the table tile's (tile_m, tile_n, rows per query, stem)
    # The table's tile, then candidates (the tile sweep for local masks).
    for tile in (None, (192, 80), (192, 64), (192, 128), (128, 128), (128, 64)) if d == 64 else (None,):
        try:
            t_win = graph_time_ms(lambda i: fa4gen.flash_attn_func(q, k, v, causal=True, window_size=(w - 1, 0),
                                                                   tile_mn=tile), 1)
        except Exception as e:  # noqa: BLE001
            emit(bench="window128-S16k", d=d, tile=tile, error=str(e)[:200])
            continue
        stem = fa4gen.kernel_name(q, k, v, causal=True, window_size=(w - 1, 0), tile_mn=tile)
        tm, tn = tile_of(stem)
        work = window_work(s, w, g, stem) / dense_work(s, s, g, full_stem)
        emit(bench="window128-S16k", d=d, H=h, Hkv=hkv, tile=tile, ms_window=round(t_win, 4),
             ms_unmasked=round(t_full, 4), visited_fraction=round(work, 5),
             ratio_to_visited_work=round(t_win / (t_full * work), 3), kernel=stem, unmasked_kernel=full_stem,
             target="<= 1.2")
        if tile is None:
            selected = (tm, tn, g if ".packgqa" in stem else 1, stem)
    if selected is not None:
        same_blocks(q, k, v, w, selected)
    if d != 64:
        return
    # FA4 on the same window and unmasked call: its own ratio, beside ours.
    if FA4 is not None:
        ours = fa4gen.flash_attn_func(q, k, v, causal=True, window_size=(w - 1, 0))[0]
        fa4_win = fa4_ms("flash_attn_func", ours, (q, k, v), causal=True, window_size=(w - 1, 0))
        fa4_full = fa4_ms("flash_attn_func", fa4gen.flash_attn_func(q, k, v)[0], (q, k, v))
        ours_win = graph_time_ms(lambda i: fa4gen.flash_attn_func(q, k, v, causal=True, window_size=(w - 1, 0)), 1)
        emit(bench="window128-S16k", impl="fa4", ms_window=rounded(fa4_win), ms_unmasked=rounded(fa4_full),
             fa4gen_ms_window=round(ours_win, 4), fa4gen_ms_unmasked=round(t_full, 4),
             fa4gen_over_fa4_window=None if isinstance(fa4_win, str) else round(fa4_win / ours_win, 3))
    # The same window through FlexAttention, the peer that skips the hidden blocks too.
    ms = flex_ms([q], [k], [v], w)
    emit(bench="window128-S16k", impl="flex-attention", ms=ms if isinstance(ms, str) else round(ms, 4))


def varlen():
    rng = random.Random(5)
    h, hkv, d = 32, 8, 128
    lens = [rng.randint(64, 4096) for _ in range(16)]
    total, mx = sum(lens), max(lens)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(16)], dtype=torch.int32, device=DEV)
    q = torch.randn(total, h, d, device=DEV, dtype=BF)
    k = torch.randn(total, hkv, d, device=DEV, dtype=BF)
    v = torch.randn(total, hkv, d, device=DEV, dtype=BF)
    qp = torch.randn(16, mx, h, d, device=DEV, dtype=BF)
    kp = torch.randn(16, mx, hkv, d, device=DEV, dtype=BF)
    vp = torch.randn(16, mx, hkv, d, device=DEV, dtype=BF)
    pairs = h * sum(n * (n + 1) / 2 for n in lens)
    t_var = graph_time_ms(lambda i: fa4gen.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                                  max_seqlen_q=mx, max_seqlen_k=mx, causal=True), 1)
    t_pad = graph_time_ms(lambda i: fa4gen.flash_attn_func(qp, kp, vp, causal=True), 1)
    row = dict(bench="varlen-16x(64..4k)", tokens=total, max_len=mx, fa4gen_varlen_ms=round(t_var, 4),
               fa4gen_padded_ms=round(t_pad, 4), varlen_tflops_real=round(4 * pairs * d / t_var / 1e9, 1))
    kr, vr = kp.repeat_interleave(h // hkv, dim=2), vp.repeat_interleave(h // hkv, dim=2)
    for name, backend in PEERS:
        ms = sdpa_ms(backend, [qp], [kr], [vr], is_causal=True)
        row[f"sdpa_{name}_padded_ms"] = ms if isinstance(ms, str) else round(ms, 4)
    if FA4 is not None:
        kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx, max_seqlen_k=mx, causal=True)
        ours = fa4gen.flash_attn_varlen_func(q, k, v, **kw)[0]
        row["fa4_varlen_ms"] = rounded(fa4_ms("flash_attn_varlen_func", ours, (q, k, v), **kw))
        ours = fa4gen.flash_attn_func(qp, kp, vp, causal=True)[0]
        row["fa4_padded_ms"] = rounded(fa4_ms("flash_attn_func", ours, (qp, kp, vp), causal=True))
    emit(**row)


def paged(rounds=5):
    """Paged vs contiguous K/V on the same shape. Every variant is timed in each of `rounds`
    interleaved rounds and reported as its median: single back-to-back timings of this shape
    moved by up to 20% between runs (clocks), more than the effect measured."""
    b, sq, sk, h, hkv, d = 8, 1024, 4096, 32, 8, 128
    q = torch.randn(b, sq, h, d, device=DEV, dtype=BF)
    k = torch.randn(b, sk, hkv, d, device=DEV, dtype=BF)
    v = torch.randn(b, sk, hkv, d, device=DEV, dtype=BF)
    calls = {"contiguous": lambda i: fa4gen.flash_attn_func(q, k, v, causal=True),
             "contiguous_tile128x128": lambda i: fa4gen.flash_attn_func(q, k, v, causal=True, tile_mn=(128, 128))}
    row = dict(bench="paged-prefill B8 Sq1024 Sk4096 d128 H32/8", rounds=rounds,
               contiguous_kernel=fa4gen.kernel_name(q, k, v, causal=True))
    if FA4 is not None:
        row["fa4_contiguous_ms"] = rounded(fa4_ms("flash_attn_func", fa4gen.flash_attn_func(q, k, v, causal=True)[0],
                                                  (q, k, v), causal=True))
    keep = []
    for page in (128, 16):
        pps = sk // page
        perm = torch.randperm(b * pps + 7, device=DEV)[: b * pps].to(torch.int32).view(b, pps)
        kpg = torch.empty(b * pps + 7, page, hkv, d, device=DEV, dtype=BF)
        vpg = torch.empty_like(kpg)
        kpg[perm.flatten().long()] = k.reshape(b * pps, page, hkv, d)
        vpg[perm.flatten().long()] = v.reshape(b * pps, page, hkv, d)
        keep.append((kpg, vpg, perm))

        def call(tile, kpg=kpg, vpg=vpg, perm=perm):
            return lambda i: fa4gen.flash_attn_varlen_func(q, kpg, vpg, page_table=perm, causal=True, tile_mn=tile)
        calls[f"page{page}"] = call(None)
        if FA4 is not None:  # (FA4 times once, outside the rounds: a peer's figure, not an A/B)
            ours = fa4gen.flash_attn_varlen_func(q, kpg, vpg, page_table=perm, causal=True)[0]
            row[f"fa4_page{page}_ms"] = rounded(fa4_ms("flash_attn_varlen_func", ours, (q, kpg, vpg),
                                                       page_table=perm, causal=True))
        for tile in ((128, 128), (128, 160)):  # the tile sweep for paged K/V
            calls[f"page{page}_tile{tile[0]}x{tile[1]}"] = call(tile)
        # Bit-equality against contiguous K/V on the paged kernel's tile (the sm90 flagship
        # takes 128x128 for whole 128-key pages, its table's 128x160 for pages of 16).
        refs = [fa4gen.flash_attn_func(q, k, v, causal=True, tile_mn=t)[0] for t in (None, (128, 128), (128, 160))]
        got = fa4gen.flash_attn_varlen_func(q, kpg, vpg, page_table=perm, causal=True)[0]
        row[f"page{page}_equals_contiguous"] = any(bool(torch.equal(r, got)) for r in refs)
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            times[name].append(graph_time_ms(fn, 1))
    med = {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}
    for name, ms in med.items():
        row[f"{name}_ms"] = round(ms, 4)
    for page in (128, 16):
        row[f"page{page}_fraction_of_contiguous"] = round(med["contiguous"] / med[f"page{page}"], 3)
        row[f"page{page}_fraction_of_best_contiguous"] = round(
            min(med["contiguous"], med["contiguous_tile128x128"]) / med[f"page{page}"], 3)
    row["spread_contiguous_ms"] = [round(x, 4) for x in sorted(times["contiguous"])]
    row["spread_page16_ms"] = [round(x, 4) for x in sorted(times["page16"])]
    emit(**row)
    del keep


def decode():
    h, hkv, d = 32, 8, 128
    for sk in (4096, 32768, 131072):
        for b in (1, 8, 64):
            kv_bytes = 2 * b * sk * hkv * d * 2
            n = copies_for(kv_bytes)
            qs = [torch.randn(b, 1, h, d, device=DEV, dtype=BF) for _ in range(n)]
            ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
            vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
            row = dict(bench="decode", B=b, Sk=sk, kv_mb=round(kv_bytes / 2**20, 1))
            gbs = lambda ms: round(kv_bytes / ms / 1e6, 1)  # noqa: E731
            for label, splits in (("split", 0), ("unsplit", 1)):
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True,
                                                                    num_splits=splits), n)
                row[f"fa4gen_{label}_us"], row[f"fa4gen_{label}_GBs"] = round(ms * 1e3, 1), gbs(ms)
            row["fa4gen_unsplit_kernel"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=True, num_splits=1)
            for name, backend in PEERS + (("efficient", SDPBackend.EFFICIENT_ATTENTION),):
                ms = sdpa_ms(backend, qs, ks, vs, enable_gqa=True)
                row[f"sdpa_{name}_GBs"] = ms if isinstance(ms, str) else gbs(ms)
            # FA4's split heuristic (num_splits=0) and one split, as fa4gen's two columns.
            for label, splits in (("split", 0), ("unsplit", 1)) if FA4 is not None else ():
                ours = fa4gen.flash_attn_func(qs[0], ks[0], vs[0], causal=True, num_splits=splits)[0]
                ms = fa4_ms("flash_attn_func", ours, *zip(qs, ks, vs), n=n, causal=True, num_splits=splits)
                row[f"fa4_{label}_GBs"] = ms if isinstance(ms, str) else gbs(ms)
            # Paged (page 128), same keys.
            pps = sk // 128
            perm = torch.randperm(b * pps, device=DEV).to(torch.int32).view(b, pps)
            kpg = torch.empty(b * pps, 128, hkv, d, device=DEV, dtype=BF)
            vpg = torch.empty_like(kpg)
            kpg[perm.flatten().long()] = ks[0].reshape(b * pps, 128, hkv, d)
            vpg[perm.flatten().long()] = vs[0].reshape(b * pps, 128, hkv, d)
            del ks[1:], vs[1:]
            ms = graph_time_ms(lambda i: fa4gen.flash_attn_varlen_func(qs[0], kpg, vpg, page_table=perm, causal=True,
                                                                       num_splits=0), 1)
            row["fa4gen_paged128_split_GBs"] = gbs(ms)
            row["ceiling_GBs"] = COPY_CEILING_GBS
            emit(**row)
            if b == 8 and sk == 32768:
                graph_replay_check(qs[0], kpg, vpg, perm)
            del qs, ks, vs, kpg, vpg
            torch.cuda.empty_cache()


def decode_unsplit():
    """Unsplit decode steps (num_splits=1, FA4's default) on few CTAs: d 64 / 128 / 256, B 1..32,
    contiguous and paged K/V, GB/s of K + V with the kernel taken; up to Sk 4k each output is checked
    against an fp32 reference first. DECODE_UNSPLIT_SK and DECODE_UNSPLIT_D pick the lengths and
    head dims."""
    shapes = [(128, 32, 8, b) for b in (1, 4, 8, 16, 32)] + [(64, 64, 8, b) for b in (1, 8, 16)] + \
        [(256, 16, 8, b) for b in (1, 8)]
    # DECODE_UNSPLIT_D="256" (or "64,128") keeps those head dims only.
    dims = [int(x) for x in os.environ.get("DECODE_UNSPLIT_D", "").replace(",", " ").split()]
    shapes = [s for s in shapes if not dims or s[0] in dims]
    if not shapes:
        sys.exit(f"DECODE_UNSPLIT_D={dims}: no decode-unsplit shape has these head dims (64, 128, 256)")
    for d, h, hkv, b in shapes:
        for sk in [int(x) for x in os.environ.get("DECODE_UNSPLIT_SK", "4096 32768").split()]:
            kv_bytes = 2 * b * sk * hkv * d * 2
            n = copies_for(kv_bytes)
            qs = [torch.randn(b, 1, h, d, device=DEV, dtype=BF) for _ in range(n)]
            ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
            vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
            row = dict(bench="decode-unsplit", d=d, H=h, Hkv=hkv, B=b, Sk=sk)
            gbs = lambda ms: round(kv_bytes / ms / 1e6, 1)  # noqa: E731
            out = fa4gen.flash_attn_func(qs[0], ks[0], vs[0], causal=True, num_splits=1)[0]
            if sk <= 4096:
                ref = F.scaled_dot_product_attention(qs[0].float().transpose(1, 2), ks[0].float().transpose(1, 2),
                                                      vs[0].float().transpose(1, 2), enable_gqa=True).transpose(1, 2)
                row["max_err"] = round((out.float() - ref).abs().max().item(), 5)
            ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True, num_splits=1), n)
            row["GBs"] = gbs(ms)
            row["kernel"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=True, num_splits=1)
            for page in (16, 128) if d <= 128 and b in (1, 8) and sk > 0 and sk % 128 == 0 else ():
                # As many paged copies as contiguous ones (one table), so neither sits in L2.
                pps = sk // page
                perm = torch.randperm(b * pps, device=DEV).to(torch.int32).view(b, pps)
                kpg, vpg = [], []
                for i in range(n):
                    kpg.append(torch.empty(b * pps, page, hkv, d, device=DEV, dtype=BF))
                    vpg.append(torch.empty_like(kpg[i]))
                    kpg[i][perm.flatten().long()] = ks[i].reshape(b * pps, page, hkv, d)
                    vpg[i][perm.flatten().long()] = vs[i].reshape(b * pps, page, hkv, d)
                call = lambda i: fa4gen.flash_attn_varlen_func(qs[i], kpg[i], vpg[i], page_table=perm,  # noqa: E731
                                                               causal=True, num_splits=1)
                row[f"paged{page}_err"] = round((call(0)[0].float() - out.float()).abs().max().item(), 5)
                row[f"paged{page}_GBs"] = gbs(graph_time_ms(call, n))
                del kpg, vpg
            emit(**row)
            del qs, ks, vs
            torch.cuda.empty_cache()


def decode_rows():
    """Unsplit steps of a few query rows (num_splits=1): MHA (group 1) with 1 to 64 queries per
    sequence (speculative decoding's verify step), B 1 and 4, and GQA 8 with 8 queries (64 packed
    rows), B 1 and 8; d 128, over Sk in $DECODE_UNSPLIT_SK (4096 32768); GB/s of K + V and the kernel
    taken, each output checked against fp32 up to 4k keys."""
    for h, hkv, sq, b in [(32, 32, sq, b) for sq in (1, 4, 16, 64) for b in (1, 4)] + [(32, 8, 8, 1), (32, 8, 8, 8)]:
        d = 128
        for sk in [int(x) for x in os.environ.get("DECODE_UNSPLIT_SK", "4096 32768").split()]:
            kv_bytes = 2 * b * sk * hkv * d * 2
            n = copies_for(kv_bytes)
            qs = [torch.randn(b, sq, h, d, device=DEV, dtype=BF) for _ in range(n)]
            ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
            vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
            row = dict(bench="decode-rows", d=d, H=h, Hkv=hkv, B=b, Sq=sq, Sk=sk)
            out = fa4gen.flash_attn_func(qs[0], ks[0], vs[0], causal=True, num_splits=1)[0]
            if sk <= 4096:
                # Bottom-right causal: query i sees keys up to Sk - Sq + i.
                mask = torch.ones(sq, sk, device=DEV, dtype=torch.bool).tril(sk - sq)
                ref = F.scaled_dot_product_attention(qs[0].float().transpose(1, 2), ks[0].float().transpose(1, 2),
                                                      vs[0].float().transpose(1, 2), attn_mask=mask,
                                                      enable_gqa=True).transpose(1, 2)
                row["max_err"] = round((out.float() - ref).abs().max().item(), 5)
            ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True, num_splits=1), n)
            row["GBs"] = round(kv_bytes / ms / 1e6, 1)
            row["kernel"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=True, num_splits=1)
            emit(**row)
            del qs, ks, vs
            torch.cuda.empty_cache()


def graph_replay_check(q, k, v, table):
    """A decode step (split-KV, paged) captured in a CUDA graph replays to the eager result."""
    eager, eager_lse = fa4gen.flash_attn_varlen_func(q, k, v, page_table=table, causal=True, num_splits=0,
                                                     return_lse=True)
    out = torch.empty_like(eager)
    lse = torch.empty_like(eager_lse)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fa4gen.flash_attn_varlen_func(q, k, v, page_table=table, causal=True, num_splits=0, return_lse=True,
                                      out=out, lse=lse)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    emit(bench="decode-graph-replay", equal_to_eager=bool(torch.equal(out, eager) and torch.equal(lse, eager_lse)))


def decode_tiles():
    """Decode tile candidates (B=1 and 64, Sk=32k, split heuristic): which tile the table takes."""
    h, hkv, d, sk = 32, 8, 128, 32768
    for b in (1, 64):
        kv_bytes = 2 * b * sk * hkv * d * 2
        n = copies_for(kv_bytes)
        qs = [torch.randn(b, 1, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        for tile in (None, (64, 64), (64, 128), (128, 32), (64, 32)):
            try:
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True, num_splits=0,
                                                                    tile_mn=tile), n)
                emit(bench="decode-tiles", B=b, Sk=sk, tile=tile, GBs=round(kv_bytes / ms / 1e6, 1))
            except Exception as e:  # noqa: BLE001
                emit(bench="decode-tiles", B=b, tile=tile, error=str(e)[:200])
        del qs, ks, vs
        torch.cuda.empty_cache()


def decode_splits():
    """The split count on sm90: FA4's rule over SMs (132 / CTAs) vs fa4gen's over CTA slots."""
    h, hkv, d, sk = 32, 8, 128, 32768
    for b in (1, 8):
        kv_bytes = 2 * b * sk * hkv * d * 2
        n = copies_for(kv_bytes)
        qs = [torch.randn(b, 1, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        fa4_rule = max(1, min(132 // (b * hkv), 128))
        for splits in sorted({0, fa4_rule, 2 * fa4_rule, 4 * fa4_rule, max(1, fa4_rule // 2)}):
            ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True,
                                                                num_splits=splits), n)
            emit(bench="decode-splits", B=b, Sk=sk, num_splits=splits if splits else "heuristic",
                 fa4_rule=fa4_rule, GBs=round(kv_bytes / ms / 1e6, 1))
        del qs, ks, vs
        torch.cuda.empty_cache()


DENSE_TILE_SHAPES = [  # (d, dv, S, tiles to try beside the table's)
    (64, 64, 512, ((128, 128), (192, 128))),
    (64, 64, 1024, ((128, 128), (192, 128))),
    (64, 64, 4096, ((128, 128), (192, 128))),
    (64, 64, 16384, ((128, 128), (192, 128))),
    (128, 128, 512, ((128, 128), (128, 96), (64, 128))),
    (128, 128, 1024, ((128, 128), (128, 96))),
    (128, 128, 4096, ((128, 128), (128, 160))),
    (128, 128, 8192, ((128, 128), (128, 160))),
    (128, 128, 16384, ((128, 128), (128, 160))),
    (256, 256, 512, ((128, 64), (64, 128))),
    (256, 256, 1024, ((128, 64),)),
    (192, 128, 512, ((128, 96), (64, 128))),
]


def dense_tiles():
    """The flagship's other tiles beside the table's on the #4 matrix's shapes (B*S = 16k,
    H*d = 2048, H 16 at 192/128), full and causal, each tile timed in 3 interleaved rounds
    (medians). Not in the default sections."""
    for d, dv, s, tiles in DENSE_TILE_SHAPES:
        b, h = 16384 // s, (16 if d == 192 else 2048 // d)
        q, k = (torch.randn(b, s, h, d, device=DEV, dtype=BF) for _ in range(2))
        v = torch.randn(b, s, h, dv, device=DEV, dtype=BF)
        for causal in (False, True):
            flops = 2 * b * h * s * s * (d + dv) / (2 if causal else 1)
            times = {}
            for _ in range(3):
                for tile in (None,) + tiles:
                    try:
                        ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(q, k, v, causal=causal, tile_mn=tile), 1)
                    except Exception as e:  # noqa: BLE001
                        times[tile] = str(e)[:200]
                        continue
                    if not isinstance(times.get(tile, []), str):
                        times.setdefault(tile, []).append(ms)
            for tile, ts in times.items():
                if isinstance(ts, str):
                    emit(bench="dense-tiles", d=d, dv=dv, S=s, causal=causal, tile=tile, error=ts)
                    continue
                ms = sorted(ts)[len(ts) // 2]
                emit(bench="dense-tiles", d=d, dv=dv, S=s, causal=causal, tile=tile, ms=round(ms, 4),
                     tflops=round(flops / ms / 1e9, 1),
                     kernel=fa4gen.kernel_name(q, k, v, causal=causal, tile_mn=tile))
        del q, k, v


PACK_GQA_SHAPES = [
    # (B, Sq, Sk, H, Hkv, d, causal, window, sinks): gpt-oss-like d 64, Llama-like d 128,
    # and short query chunks over a long cache (which only packing brings to the flagship).
    *[(16384 // s, s, s, 64, 8, 64, True, (None, None), True) for s in (512, 1024, 4096)],
    (1, 16384, 16384, 64, 8, 64, True, (127, 0), False),
    *[(16384 // s, s, s, 64, 8, 128, True, (None, None), False) for s in (1024, 4096)],
    (16, 1024, 1024, 64, 8, 128, False, (None, None), False),
    *[(4, sq, 8192, 64, 8, 128, True, (None, None), False) for sq in (32, 128, 512)],
]


def pack_gqa():
    """GQA packed into the M dimension against unpacked (pack_gqa=True / False through the
    drop-in) on PACK_GQA_SHAPES: what the default (None) takes where, and by how much.
    Unpacked short queries (Sq <= 64) run on the portable kernel."""
    for b, sq, sk, h, hkv, d, causal, window, sinks in PACK_GQA_SHAPES:
        n = copies_for(2 * b * (sq * h + 2 * sk * hkv) * d)
        qs = [torch.randn(b, sq, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        sink = torch.randn(h, device=DEV) if sinks else None
        row = dict(bench="pack-gqa", b=b, sq=sq, sk=sk, h=h, hkv=hkv, d=d, causal=causal, window=window, sinks=sinks)
        kw = dict(causal=causal, window_size=window, learnable_sink=sink)
        row["default"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], **kw)
        for pack in (False, True):
            try:
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], pack_gqa=pack, **kw), n)
            except Exception as e:  # noqa: BLE001
                row[f"error_pack{int(pack)}"] = str(e)[:150]
                continue
            row[f"ms_pack{int(pack)}"] = round(ms, 4)
            row[f"kernel_pack{int(pack)}"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], pack_gqa=pack, **kw)
        if "ms_pack0" in row and "ms_pack1" in row:
            row["packed_speedup"] = round(row["ms_pack0"] / row["ms_pack1"], 3)
        emit(**row)
        del qs, ks, vs


CHUNKED_SHAPES = [  # (B, Sq, Sk, H, Hkv, d, causal): query chunks over a long cache
    (1, 128, 8192, 32, 8, 128, True),
    (1, 192, 8192, 32, 8, 128, True),
    (1, 256, 8192, 32, 8, 128, True),
    (1, 128, 32768, 32, 8, 128, True),
    (1, 192, 32768, 32, 8, 128, True),
    (1, 256, 32768, 32, 8, 128, True),
    (1, 512, 32768, 32, 8, 128, True),
    (1, 1024, 32768, 32, 8, 128, True),
    (2, 32, 8192, 64, 8, 128, True),
    (4, 32, 8192, 64, 8, 128, True),
    (1, 128, 16384, 64, 8, 64, True),
    (1, 256, 16384, 64, 8, 64, True),
    (1, 256, 32768, 64, 8, 64, True),
    (1, 256, 16384, 64, 8, 64, False),
    (1, 256, 32768, 32, 8, 128, False),
    (1, 128, 8192, 32, 8, 128, False),
    (1, 256, 32768, 32, 8, 96, True),
    (1, 256, 4096, 32, 8, 128, True),
]


def chunked():
    """Chunked prefill: a chunk of Sq queries over Sk cached keys, too few tiles to fill the GPU.
    The default (num_splits=1, FA4's) runs the sm90 flagship unsplit on as many CTAs as tiles
    (for d 65-128 its 64-row fill tile where 128-row tiles fill half the SMs or less, from 4k
    keys); num_splits=0 takes the split heuristic (on sm90 the flagship's own split-KV);
    explicit splits beside them; for d 65-128 the unsplit flagship forced onto its 128x128 and
    64x128 tiles, and the heuristic's split onto 128x128; for d 64 onto 192x128 (the table's)
    and 128x128 (the one-round tile, `flagship_one_round`), the split onto 192x128. Causal is
    bottom-right (query i sees Sk - Sq + i + 1 keys); SDPA's causal is top-left, so cuDNN runs
    beside the unmasked rows only."""
    for b, sq, sk, h, hkv, d, causal in CHUNKED_SHAPES:
        n = copies_for(2 * b * (sq * h + 2 * sk * hkv) * d)
        qs = [torch.randn(b, sq, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        pairs = sq * (sk - sq) + sq * (sq + 1) // 2 if causal else sq * sk
        flop = 4 * b * h * d * pairs
        row = dict(bench="chunked", b=b, sq=sq, sk=sk, h=h, hkv=hkv, d=d, causal=causal)
        # Unsplit and the heuristic twice each, in turns (the clocks drift within a section).
        tiles = (((None, ""), ((128, 128), "_m128"), ((64, 128), "_m64")) if 64 < d <= 128 else
                 ((None, ""), ((192, 128), "_m192"), ((128, 128), "_m128")) if d <= 64 else ((None, ""),))
        for splits, key in ((1, "splits1"), (0, "heuristic"), (2, "splits2"), (4, "splits4"), (8, "splits8"),
                            (0, "heuristic_again"), (1, "splits1_again")):
            for tile_mn, suffix in (tiles if splits == 1 else tiles[:2] if splits == 0 else ((None, ""),)):
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=causal, num_splits=splits,
                                                                    tile_mn=tile_mn), n)
                row[f"ms_{key}{suffix}"] = round(ms, 4)
                row[f"tflops_{key}{suffix}"] = round(flop / ms / 1e9, 1)
        row["kernel_default"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=causal)
        row["kernel_heuristic"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=causal, num_splits=0)
        for splits, key in ((1, "splits1"), (0, "heuristic")) if FA4 is not None else ():
            ours = fa4gen.flash_attn_func(qs[0], ks[0], vs[0], causal=causal, num_splits=splits)[0]
            ms = fa4_ms("flash_attn_func", ours, *zip(qs, ks, vs), n=n, causal=causal, num_splits=splits)
            row[f"fa4_ms_{key}"] = rounded(ms)
        if not causal:
            kr = [k.repeat_interleave(h // hkv, dim=2) for k in ks]
            vr = [v.repeat_interleave(h // hkv, dim=2) for v in vs]
            ms = sdpa_ms(SDPBackend.CUDNN_ATTENTION, qs, kr, vr)
            row["cudnn_ms"] = ms if isinstance(ms, str) else round(ms, 4)
            if not isinstance(ms, str):
                row["cudnn_tflops"] = round(flop / ms / 1e9, 1)
            del kr, vr
        emit(**row)
        del qs, ks, vs
        torch.cuda.empty_cache()


def chunked_paged():
    """Chunked prefill over a paged cache (pages of 16 and 128 keys, shuffled), as an engine calls
    it: the default (num_splits=1: on sm90 the 64-row fill tile where 128-row tiles fill half the
    SMs or less; at d 64 the 128-row tile where those fit one round), the same forced onto 128x128
    (d 64: 192x128), and the split heuristic (num_splits=0: the flagship's split-KV), beside the
    default on contiguous K/V."""
    for b, sq, sk, h, hkv, d in ((1, 128, 8192, 32, 8, 128), (1, 256, 32768, 32, 8, 128),
                                 (1, 128, 32768, 32, 8, 128), (2, 32, 8192, 64, 8, 128),
                                 (1, 256, 16384, 64, 8, 64)):
        q = torch.randn(b, sq, h, d, device=DEV, dtype=BF)
        k = torch.randn(b, sk, hkv, d, device=DEV, dtype=BF)
        v = torch.randn(b, sk, hkv, d, device=DEV, dtype=BF)
        flop = 4 * b * h * d * (sq * (sk - sq) + sq * (sq + 1) // 2)
        row = dict(bench="chunked-paged", b=b, sq=sq, sk=sk, h=h, hkv=hkv, d=d, causal=True)
        ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(q, k, v, causal=True), 1)
        row["contiguous_ms"] = round(ms, 4)
        for page in (128, 16):
            pps = sk // page
            perm = torch.randperm(b * pps, device=DEV).to(torch.int32).view(b, pps)
            kpg = torch.empty(b * pps, page, hkv, d, device=DEV, dtype=BF)
            vpg = torch.empty_like(kpg)
            kpg[perm.flatten().long()] = k.reshape(b * pps, page, hkv, d)
            vpg[perm.flatten().long()] = v.reshape(b * pps, page, hkv, d)
            forced = (("m192", dict(tile_mn=(192, 128))),) if d <= 64 else (("m128", dict(tile_mn=(128, 128))),)
            for key, kw in (("default", {}),) + forced + (("heuristic", dict(num_splits=0)),):
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_varlen_func(q, kpg, vpg, page_table=perm, causal=True,
                                                                           **kw), 1)
                row[f"page{page}_{key}_ms"] = round(ms, 4)
                row[f"page{page}_{key}_tflops"] = round(flop / ms / 1e9, 1)
            del kpg, vpg
        emit(**row)
        del q, k, v
        torch.cuda.empty_cache()


FEW_TILES_SHAPES = [  # (B, S, H, Hkv, d, causal): prefill on a tensor-parallel shard's few heads
    (1, 512, 8, 1, 128, True),
    (1, 1024, 8, 1, 128, True),
    (1, 2048, 4, 1, 128, True),
    (1, 1024, 8, 1, 128, False),
    (1, 4096, 2, 1, 128, True),
    (1, 1024, 16, 2, 64, True),
    (1, 1024, 4, 1, 256, True),
]


def few_tiles():
    """Prefill (Sq = Sk) whose flagship tiles fill under half the GPU, as a tensor-parallel shard
    of a large model sees it (a few heads per GPU): unsplit (num_splits=1), the split heuristic
    (num_splits=0; on sm90 the flagship's split), and explicit splits of 2 and 4."""
    for b, s, h, hkv, d, causal in FEW_TILES_SHAPES:
        n = copies_for(2 * b * s * (h + 2 * hkv) * d)
        qs = [torch.randn(b, s, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(b, s, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(b, s, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        pairs = s * (s + 1) // 2 if causal else s * s
        flop = 4 * b * h * d * pairs
        row = dict(bench="few-tiles", b=b, s=s, h=h, hkv=hkv, d=d, causal=causal)
        for splits, key in ((1, "splits1"), (0, "heuristic"), (2, "splits2"), (4, "splits4"),
                            (0, "heuristic_again"), (1, "splits1_again")):
            ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=causal,
                                                                num_splits=splits), n)
            row[f"ms_{key}"] = round(ms, 4)
            row[f"tflops_{key}"] = round(flop / ms / 1e9, 1)
        row["kernel_default"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=causal)
        row["kernel_heuristic"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=causal, num_splits=0)
        emit(**row)
        del qs, ks, vs
        torch.cuda.empty_cache()


SPLIT_SWEEP_SHAPES = [  # (B, Sq, Sk, H, Hkv, d, causal): calls the split heuristic splits, or nearly
    (1, 4096, 4096, 2, 1, 128, True),        # causal squares on few heads: uneven tiles
    (1, 2048, 2048, 4, 1, 128, True),
    (1, 8192, 8192, 1, 1, 128, True),
    (1, 1024, 1024, 4, 1, 256, True),
    (1, 128, 8192, 32, 8, 128, True),        # chunked prefill (bottom-right): even tiles
    (1, 256, 4096, 32, 8, 128, True),
    (1, 256, 8192, 32, 8, 128, True),
    (1, 128, 32768, 32, 8, 128, True),
    (1, 512, 32768, 32, 8, 128, True),       # 128 tiles: FA4's rule leaves it unsplit
    (4, 32, 8192, 64, 8, 128, True),         # packed GQA
    (1, 128, 16384, 64, 8, 64, True),        # gpt-oss chunks (192-row tiles)
    (1, 256, 16384, 64, 8, 64, True),
    (1, 512, 16384, 64, 8, 64, True),
    (1, 1024, 8192, 16, 2, 128, False),      # unmasked
    # Shapes the schedule model (split_count.rs) was not fitted on, its count beside each
    (1, 256, 8192, 64, 8, 64, True),         # model 3 (FA4 1)
    (1, 256, 32768, 64, 8, 64, True),        # 3
    (4, 250, 4133, 16, 2, 64, True),         # 3 (the GPU test's case)
    (1, 384, 16384, 64, 8, 64, True),        # 1 (128 tiles)
    (1, 768, 16384, 32, 8, 128, True),       # 2 (192 tiles)
    (1, 640, 32768, 32, 8, 128, True),       # 4 (160 tiles)
    (1, 1024, 16384, 32, 8, 128, True),      # 1 (256 tiles)
    (1, 768, 8192, 32, 8, 128, False),       # 1 (unmasked, unpacked: the split tail)
    (1, 3072, 3072, 4, 1, 128, True),        # 1 (FA4's)
    (1, 6144, 6144, 2, 1, 128, True),        # 3
    (1, 1536, 1536, 4, 4, 256, True),        # 3 (FA4 2; 2-4 tie)
]


def split_sweep():
    """The split count by hand (1, 2, 3, 4, 6, 8) beside the heuristic's (num_splits=0), in two
    interleaved rounds: where the heuristic's count is off, and by how much."""
    for b, sq, sk, h, hkv, d, causal in SPLIT_SWEEP_SHAPES:
        n = copies_for(2 * b * (sq * h + 2 * sk * hkv) * d)
        qs = [torch.randn(b, sq, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        row = dict(bench="split-sweep", b=b, sq=sq, sk=sk, h=h, hkv=hkv, d=d, causal=causal,
                   kernel_default=fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=causal),
                   kernel_heuristic=fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=causal, num_splits=0))
        # The second round in reverse order: a call's clock depends on what ran before it.
        for rnd, order in (("", (1, 0, 2, 3, 4, 6, 8)), ("_again", (8, 6, 4, 3, 2, 0, 1))):
            for splits in order:
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=causal, num_splits=splits), n)
                row[f"ms_{splits if splits else 'heuristic'}{rnd}"] = round(ms, 4)
        emit(**row)
        del qs, ks, vs
        torch.cuda.empty_cache()


ENGINE_CHUNKS = [  # (Sq, Sk, H, Hkv, d, sinks): one sequence's chunk as an engine calls it
    (256, 8192, 64, 8, 64, True),            # gpt-oss full layers
    (256, 16384, 64, 8, 64, True),
    (512, 16384, 64, 8, 64, True),
    (1000, 4133, 64, 8, 64, True),
    (768, 16384, 32, 8, 128, False),         # Llama-like
    (640, 32768, 32, 8, 128, False),
]


def engine_chunks():
    """A chunk of one sequence as an engine calls it (flash_attn_varlen_func: packed queries
    with cu_seqlens_q, K/V in shuffled pages of 16 with seqused_k, causal, gpt-oss's sinks):
    unsplit (the default), the heuristic, and counts by hand, in two rounds."""
    for sq, sk, h, hkv, d, sinks in ENGINE_CHUNKS:
        page = 16
        pages = sk // page + 1
        q = torch.randn(sq, h, d, device=DEV, dtype=BF)
        kpg = torch.randn(pages, page, hkv, d, device=DEV, dtype=BF)
        vpg = torch.randn(pages, page, hkv, d, device=DEV, dtype=BF)
        table = torch.randperm(pages, device=DEV).to(torch.int32).view(1, pages)
        cu_q = torch.tensor([0, sq], device=DEV, dtype=torch.int32)
        used_k = torch.tensor([sk], device=DEV, dtype=torch.int32)
        sink = torch.randn(h, device=DEV, dtype=torch.float32) if sinks else None
        flop = 4 * h * d * (sq * (sk - sq) + sq * (sq + 1) // 2)
        row = dict(bench="engine-chunks", sq=sq, sk=sk, h=h, hkv=hkv, d=d, sinks=sinks, page=page)

        def call(splits):
            return fa4gen.flash_attn_varlen_func(q, kpg, vpg, cu_seqlens_q=cu_q, max_seqlen_q=sq, max_seqlen_k=sk,
                                                 seqused_k=used_k, page_table=table, causal=True,
                                                 learnable_sink=sink, num_splits=splits)
        for rnd, order in (("", (1, 0, 2, 3, 4)), ("_again", (4, 3, 2, 0, 1))):
            for splits in order:
                ms = graph_time_ms(lambda i: call(splits), 1)
                row[f"ms_{splits if splits else 'heuristic'}{rnd}"] = round(ms, 4)
        row["tflops_heuristic"] = round(flop / min(row["ms_heuristic"], row["ms_heuristic_again"]) / 1e9, 1)
        emit(**row)
        del q, kpg, vpg
        torch.cuda.empty_cache()


MIXED_BATCHES = [  # (name, H, Hkv, d, sinks, K layout, [(Sq, Sk) per sequence]): an engine's step in one call
    ("gpt-oss chunk 256/8k + 15 decodes", 64, 8, 64, True, "paged16", [(256, 8192)] + [(1, 1024 + 457 * i) for i in range(15)]),
    ("gpt-oss chunk 1024/2k + 63 decodes", 64, 8, 64, True, "paged16", [(1024, 2048)] + [(1, 500 + 57 * i) for i in range(63)]),
    ("llama chunk 512/16k + 7 decodes", 32, 8, 128, False, "paged16", [(512, 16384)] + [(1, 4096 + 1733 * i) for i in range(7)]),
    ("llama 4 chunks of 128 over 4k-32k", 32, 8, 128, False, "paged16", [(128, 4096), (128, 9000), (128, 17000), (128, 32768)]),
    ("llama 32 decodes over 1k-32k", 32, 8, 128, False, "paged16", [(1, 1024 + 1000 * i) for i in range(32)]),
    ("llama 16 prefills of 64..4k (#5's varlen)", 32, 8, 128, False, "packed", None),
    ("d128 H16 2 x 16k (CTA pairs' case)", 16, 16, 128, False, "packed", [(16384, 16384)] * 2),
]
MAX_CONTEXT = 131072  # the block table's width, as an engine sizes it: the model's longest context


def engine_pages(sks, hkv, d, page=16):
    """K/V of sequences of `sks` keys in shuffled pages behind block tables as wide as
    MAX_CONTEXT (an engine's): (table, k, v), random keys and values."""
    need = [-(-sk // page) for sk in sks]
    pool = sum(need) + 7
    perm = torch.randperm(pool, device=DEV).to(torch.int32)
    table = torch.zeros(len(sks), MAX_CONTEXT // page, device=DEV, dtype=torch.int32)
    at = 0
    for i, n in enumerate(need):
        table[i, :n] = perm[at:at + n]
        at += n
    k = torch.randn(pool, page, hkv, d, device=DEV, dtype=BF)
    v = torch.randn(pool, page, hkv, d, device=DEV, dtype=BF)
    return table, k, v
# (label, the device's list on, num_splits): the list against the padded schedule, by hand counts on the list.
MIXED_VARIANTS = (("list", True, 0), ("padded", False, 0), ("list_1", True, 1), ("padded_1", False, 1),
                  ("list_2", True, 2), ("list_3", True, 3), ("list_4", True, 4))


def mixed_batches():
    """An engine's step as one varlen call: sequences of mixed lengths (a prefill chunk beside
    decodes, chunks, prefills), packed queries, causal; K/V in shuffled pages of 16 behind block
    tables as wide as the model's longest context (seqused_k, max_seqlen_k given) or packed
    (cu_seqlens_k). Tiles dealt by the device's list of units (the default) against the padded
    schedule (`set_varlen_schedule(False)`: every sequence as the longest, CTA pairs where the
    rule takes them), the heuristic's split count and counts by hand, two rounds, the second
    reversed; each variant's max difference from the padded unsplit output."""
    for name, h, hkv, d, sinks, layout, seqs in MIXED_BATCHES:
        if seqs is None:
            rng = random.Random(5)
            seqs = [(n, n) for n in (rng.randint(64, 4096) for _ in range(16))]
        b = len(seqs)
        total_q = sum(sq for sq, _ in seqs)
        max_sq, max_sk = max(sq for sq, _ in seqs), max(sk for _, sk in seqs)
        q = torch.randn(total_q, h, d, device=DEV, dtype=BF)
        cu_q = torch.tensor([0] + [sum(sq for sq, _ in seqs[:i + 1]) for i in range(b)], device=DEV, dtype=torch.int32)
        kw = dict(cu_seqlens_q=cu_q, max_seqlen_q=max_sq, max_seqlen_k=max_sk, causal=True,
                  learnable_sink=torch.randn(h, device=DEV, dtype=torch.float32) if sinks else None)
        if layout == "paged16":
            table, k, v = engine_pages([sk for _, sk in seqs], hkv, d)
            kw.update(page_table=table, seqused_k=torch.tensor([sk for _, sk in seqs], device=DEV, dtype=torch.int32))
        else:
            total_k = sum(sk for _, sk in seqs)
            k = torch.randn(total_k, hkv, d, device=DEV, dtype=BF)
            v = torch.randn(total_k, hkv, d, device=DEV, dtype=BF)
            kw.update(cu_seqlens_k=torch.tensor([0] + [sum(sk for _, sk in seqs[:i + 1]) for i in range(b)],
                                                device=DEV, dtype=torch.int32))
        row = dict(bench="mixed-batches", name=name, b=b, total_q=total_q, max_sq=max_sq, max_sk=max_sk,
                   h=h, hkv=hkv, d=d, sinks=sinks, layout=layout)

        def call(splits):
            return fa4gen.flash_attn_varlen_func(q, k, v, num_splits=splits, **kw)[0]
        fa4gen.set_varlen_schedule(False)
        ref = call(1).float()
        for label, listed, splits in MIXED_VARIANTS:
            fa4gen.set_varlen_schedule(listed)
            row[f"maxdiff_{label}"] = (call(splits).float() - ref).abs().max().item()
        for rnd, order in (("", MIXED_VARIANTS), ("_again", MIXED_VARIANTS[::-1])):
            for label, listed, splits in order:
                fa4gen.set_varlen_schedule(listed)  # (selection, so the graph, takes it at capture)
                row[f"ms_{label}{rnd}"] = round(graph_time_ms(lambda i: call(splits), 1), 4)
        fa4gen.set_varlen_schedule(True)
        emit(**row)
        del q, k, v, kw
        torch.cuda.empty_cache()


DECODE_BATCHES = [  # (name, H, Hkv, d, sinks, [Sk per sequence]): a decode step, one query per sequence
    ("llama B 32 over 1k..32k", 32, 8, 128, False, [1024 + 1000 * i for i in range(32)]),
    ("llama B 8 over 1k..32k", 32, 8, 128, False, [1024 + 4400 * i for i in range(8)]),
    ("llama B 64 over 256..8k", 32, 8, 128, False, [256 + 122 * i for i in range(64)]),
    ("llama B 128 over 100..4k", 32, 8, 128, False, [100 + 31 * i for i in range(128)]),
    ("llama B 32 one of 32k, 31 of 1k", 32, 8, 128, False, [32768] + [1024] * 31),
    ("llama B 32 all 32k", 32, 8, 128, False, [32768] * 32),
    ("llama B 8 all 8k", 32, 8, 128, False, [8192] * 8),
    ("llama B 64 all 4k", 32, 8, 128, False, [4096] * 64),
    ("gpt-oss B 32 over 1k..32k", 64, 8, 64, True, [1024 + 1000 * i for i in range(32)]),
    ("gpt-oss B 64 all 4k", 64, 8, 64, True, [4096] * 64),
    ("llama B 32 over 1k..32k shuffled", 32, 8, 128, False,
     random.Random(36).sample([1024 + 1000 * i for i in range(32)], 32)),
    ("llama B 16 all 16k", 32, 8, 128, False, [16384] * 16),
]


def decode_batches():
    """A decode step as an engine calls it: one query per sequence (packed, cu_seqlens_q), K/V in
    shuffled pages of 16 behind 131072-key block tables with seqused_k and max_seqlen_k, mixed
    and equal context lengths: the heuristic's split count (each sequence its own, 2, 4 (the
    default) or 8 waves of CTA slots' worth of (sequence, split) units dealt by the sequences' K
    blocks; and FA4's one count, shares 0) beside counts by hand (one count for every sequence),
    two rounds."""
    for name, h, hkv, d, sinks, sks in DECODE_BATCHES:
        b = len(sks)
        table, k, v = engine_pages(sks, hkv, d)
        q = torch.randn(b, h, d, device=DEV, dtype=BF)
        kw = dict(cu_seqlens_q=torch.arange(b + 1, device=DEV, dtype=torch.int32), max_seqlen_q=1,
                  max_seqlen_k=max(sks), seqused_k=torch.tensor(sks, device=DEV, dtype=torch.int32),
                  page_table=table, causal=True,
                  learnable_sink=torch.randn(h, device=DEV, dtype=torch.float32) if sinks else None)
        row = dict(bench="decode-batches", name=name, b=b, h=h, hkv=hkv, d=d, sinks=sinks,
                   sum_sk=sum(sks), max_sk=max(sks))
        kv_bytes = 2 * sum(sks) * hkv * d * 2
        # (splits, shares): splits 0 is the heuristic's count, with `shares` waves of units.
        # (DECODE_VARIANTS="0:4 0:0" narrows them, e.g. for an A/B of libraries.)
        variants = [tuple(int(x) for x in v.split(":")) for v in os.environ.get("DECODE_VARIANTS", "").split()] or \
            [(0, 4), (0, 0), (0, 2), (0, 8), (1, 4), (2, 4), (4, 4), (8, 4), (16, 4)]
        for rnd, order in (("", variants), ("_again", variants[::-1])):
            for splits, shares in order:
                fa4gen.set_sequence_splits(shares)
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_varlen_func(q, k, v, num_splits=splits, **kw), 1)
                key = f"heuristic_shares{shares}" if splits == 0 else str(splits)
                row[f"ms_{key}{rnd}"] = round(ms, 4)
        fa4gen.set_sequence_splits(4)
        if "ms_heuristic_shares4" in row:
            best = min(row["ms_heuristic_shares4"], row["ms_heuristic_shares4_again"])
            row["kv_tbs_heuristic"] = round(kv_bytes / best / 1e9, 2)
        emit(**row)
        del q, k, v, kw, table
        torch.cuda.empty_cache()


COMBINE_FORWARDS = [  # (B, Sq, Sk, H, Hkv, d, causal, num_splits): forwards that split
    (1, 128, 8192, 32, 8, 128, True, 0),     # chunked prefill, the heuristic (4 splits)
    (1, 128, 32768, 32, 8, 128, True, 0),
    (1, 256, 8192, 32, 8, 128, True, 2),     # two-way splits (session 32: the fill tile under 8k)
    (1, 256, 4096, 32, 8, 128, True, 2),
    (4, 32, 8192, 64, 8, 128, True, 0),      # packed GQA, 2 splits
    (1, 1024, 1024, 8, 1, 128, True, 2),     # few-tiles prefill (8 and 16 K blocks)
    (1, 2048, 2048, 4, 1, 128, True, 2),
    (1, 1024, 1024, 4, 1, 256, True, 2),
    (1, 128, 16384, 64, 8, 64, True, 0),     # d 64 (half-warp rows)
    (1, 1, 4096, 32, 8, 128, False, 0),      # decode
    (8, 1, 32768, 32, 8, 128, False, 0),
    (64, 1, 4096, 32, 8, 128, False, 0),
]

COMBINE_ALONE = [  # (B, Sq, H, Dv, splits): flash_attn_combine on random partials
    (1, 1024, 32, 128, 2), (1, 1024, 32, 128, 4), (1, 4096, 32, 128, 2), (1, 256, 32, 128, 16),
    (8, 1, 32, 128, 16), (8, 1, 32, 128, 64), (64, 1, 32, 128, 4), (1, 1024, 64, 64, 3),
    (8, 1, 128, 512, 16), (64, 1, 128, 512, 4),  # MLA decode's dv 512 (two column parts of 256)
]


def combine():
    """The split-KV combine's two kernels (one CTA per (query, head) row; a group of lanes per row)
    and the runtime's choice between them, in turns: forwards that split (chunked prefill, short
    prefill, decode) and flash_attn_combine alone (16-bit output through each kernel, then fp32 output
    by the runtime's choice). ms per call, medians of graph replays."""
    kernels = ("row", "rows", "auto", "row_again", "rows_again", "auto_again")
    for b, sq, sk, h, hkv, d, causal, splits in COMBINE_FORWARDS:
        n = copies_for(2 * b * (sq * h + 2 * sk * hkv) * d)
        qs = [torch.randn(b, sq, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        row = dict(bench="combine-forward", b=b, sq=sq, sk=sk, h=h, hkv=hkv, d=d, causal=causal, num_splits=splits,
                   kernel=fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=causal, num_splits=splits))
        row["ms_unsplit"] = round(graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=causal), n), 4)
        for key in kernels:
            fa4gen.set_combine_kernel(key.split("_")[0])
            row[f"ms_{key}"] = round(graph_time_ms(lambda i: fa4gen.flash_attn_func(
                qs[i], ks[i], vs[i], causal=causal, num_splits=splits), n), 4)
        fa4gen.set_combine_kernel("auto")
        emit(**row)
        del qs, ks, vs
        torch.cuda.empty_cache()
    for b, sq, h, dv, splits in COMBINE_ALONE:
        n = copies_for(4 * splits * b * sq * h * (dv + 1))
        ops = [torch.randn(splits, b, sq, h, dv, device=DEV) for _ in range(n)]
        lps = [torch.randn(splits, b, h, sq, device=DEV).transpose(-1, -2) for _ in range(n)]
        outs = [torch.empty(b, sq, h, dv, device=DEV, dtype=BF) for _ in range(n)]
        row = dict(bench="combine-alone", b=b, sq=sq, h=h, dv=dv, splits=splits,
                   partial_mb=round(4 * splits * b * sq * h * dv / 2**20, 2))
        try:
            for key in kernels:
                fa4gen.set_combine_kernel(key.split("_")[0])
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_combine(ops[i], lps[i], out=outs[i], return_lse=False), n)
                row[f"us_{key}"] = round(ms * 1e3, 2)
        except (ValueError, NotImplementedError, fa4gen.FA4GenError) as e:  # an older library's refusal
            emit(**row, error=str(e)[:200])
            continue
        finally:
            fa4gen.set_combine_kernel("auto")
        # fp32 output (FA4's default for fp32 partials): twice the bytes written.
        outs = [torch.empty(b, sq, h, dv, device=DEV) for _ in range(n)]
        ms = graph_time_ms(lambda i: fa4gen.flash_attn_combine(ops[i], lps[i], out=outs[i], return_lse=False), n)
        row["us_auto_fp32"] = round(ms * 1e3, 2)
        emit(**row)
        del ops, lps, outs
        torch.cuda.empty_cache()


def window_decode():
    """Sliding-window decode steps (Sq = 1, window (w - 1, 0)) over a long cache, as an engine calls
    them: fa4gen's window call over the whole cache (contiguous, and pages of 16 and 128, shuffled),
    beside its dense call over the window's keys sliced out (what the window call should cost) and
    SDPA on that slice. GB/s of the window's K/V, read once."""
    for model, d, h, hkv, w, sink in (("gpt-oss", 64, 64, 8, 128, True), ("gemma-3", 256, 16, 8, 1024, False)):
        # Cache lengths off every block grid (a decode step's are arbitrary; on a multiple of
        # the tile both layouts visit the same blocks).
        for sk in (4133, 32771):
            for b in (1, 8, 64):
                win_bytes = 2 * b * min(w, sk) * hkv * d * 2
                n = copies_for(2 * b * sk * hkv * d * 2)
                qs = [torch.randn(b, 1, h, d, device=DEV, dtype=BF) for _ in range(n)]
                ks = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
                vs = [torch.randn(b, sk, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
                sinks = torch.randn(h, device=DEV) if sink else None
                row = dict(bench="window-decode", model=model, d=d, h=h, hkv=hkv, window=w, B=b, Sk=sk,
                           window_kv_mb=round(win_bytes / 2**20, 2))
                us = lambda ms: round(ms * 1e3, 2)  # noqa: E731
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True,
                                                                    window_size=(w - 1, 0), learnable_sink=sinks,
                                                                    num_splits=0), n)
                row["fa4gen_us"], row["fa4gen_window_GBs"] = us(ms), round(win_bytes / ms / 1e6, 1)
                row["kernel"] = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=True, window_size=(w - 1, 0),
                                                   learnable_sink=sinks, num_splits=0)
                kw_ = [k[:, -w:].contiguous() for k in ks]
                vw_ = [v[:, -w:].contiguous() for v in vs]
                ms = graph_time_ms(lambda i: fa4gen.flash_attn_func(qs[i], kw_[i], vw_[i], causal=True,
                                                                    learnable_sink=sinks, num_splits=0), n)
                row["fa4gen_slice_us"] = us(ms)
                for name, backend in PEERS:
                    ms = sdpa_ms(backend, qs, kw_, vw_, enable_gqa=True)
                    row[f"sdpa_{name}_slice_us"] = ms if isinstance(ms, str) else us(ms)
                del kw_, vw_
                used = torch.full((b,), sk, device=DEV, dtype=torch.int32)
                for page in (16, 128):
                    pps = -(-sk // page)  # the last page partly used (seqused_k)
                    perm = torch.randperm(b * pps, device=DEV).to(torch.int32).view(b, pps)
                    kpg = torch.zeros(b * pps, page, hkv, d, device=DEV, dtype=BF)
                    vpg = torch.zeros_like(kpg)
                    pad = lambda x: F.pad(x, (0, 0, 0, 0, 0, pps * page - sk))  # noqa: E731
                    kpg[perm.flatten().long()] = pad(ks[0]).reshape(b * pps, page, hkv, d)
                    vpg[perm.flatten().long()] = pad(vs[0]).reshape(b * pps, page, hkv, d)
                    ms = graph_time_ms(lambda i: fa4gen.flash_attn_varlen_func(
                        qs[0], kpg, vpg, page_table=perm, seqused_k=used, causal=True, window_size=(w - 1, 0),
                        learnable_sink=sinks, num_splits=0), 1)
                    row[f"fa4gen_paged{page}_us"] = us(ms)
                    del kpg, vpg
                emit(**row)
                del qs, ks, vs
                torch.cuda.empty_cache()


def window_l2():
    """Where window 128's time per tile goes: the same kernel on inputs L2 holds (one set, called
    again and again) and on inputs rotated past L2 (copies), at sizes of a few waves. If the tile's
    time is the same both ways, the window tile is bound by its own chain of steps, not by DRAM.
    Per wave: ms / ceil(tiles / SMs), tiles from the kernel's tile_m over the packed rows."""
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    h, hkv, d, w = 32, 4, 64, 128
    g = h // hkv
    for s in (1024, 2048, 3072, 16384):
        nbytes = 2 * s * (2 * h + 2 * hkv) * d
        n = copies_for(nbytes)
        qs = [torch.randn(1, s, h, d, device=DEV, dtype=BF) for _ in range(n)]
        ks = [torch.randn(1, s, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        vs = [torch.randn(1, s, hkv, d, device=DEV, dtype=BF) for _ in range(n)]
        outs = [torch.empty_like(q) for q in qs]
        stem = fa4gen.kernel_name(qs[0], ks[0], vs[0], causal=True, window_size=(w - 1, 0))
        tm = int(stem.split(".")[5][1:].split("n")[0])
        tiles = -(-s * g // tm) * hkv
        waves = -(-tiles // sms)
        call = lambda i: fa4gen.flash_attn_func(qs[i], ks[i], vs[i], causal=True, window_size=(w - 1, 0),  # noqa: E731
                                                out=outs[i])
        warm = graph_time_ms(lambda i: call(0), 1)
        cold = graph_time_ms(call, n)
        emit(bench="window-l2", S=s, H=h, Hkv=hkv, mb=round(nbytes / 2**20, 1), l2_mb=round(L2 / 2**20, 1),
             copies=n, tiles=tiles, waves=waves, kernel=stem, ms_l2=round(warm, 4), ms_rotated=round(cold, 4),
             us_per_wave_l2=round(warm * 1e3 / waves, 3), us_per_wave_rotated=round(cold * 1e3 / waves, 3))
        del qs, ks, vs, outs
        torch.cuda.empty_cache()


def warm_up_clocks(seconds=1.0):
    """Run the GPU busy for a while so the first timed section does not meet ramping clocks."""
    a = torch.randn(4096, 4096, device=DEV, dtype=BF)
    t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t[0].record()
    while True:
        for _ in range(20):
            a @ a
        t[1].record()
        t[1].synchronize()
        if t[0].elapsed_time(t[1]) > seconds * 1e3:
            return


SECTIONS = {"gpt-oss": gpt_oss, "window": window, "window-l2": window_l2, "short-keys": short_keys, "window-tiles": window_tiles, "varlen": varlen, "paged": paged, "pack-gqa": pack_gqa, "decode": decode, "decode-unsplit": decode_unsplit,
            "window-decode": window_decode, "decode-tiles": decode_tiles, "decode-splits": decode_splits, "dense-tiles": dense_tiles, "chunked": chunked,
            "chunked-paged": chunked_paged, "few-tiles": few_tiles, "decode-rows": decode_rows, "combine": combine,
            "split-sweep": split_sweep, "engine-chunks": engine_chunks, "mixed-batches": mixed_batches, "decode-batches": decode_batches}
DEFAULT = [s for s in SECTIONS if s not in ("dense-tiles", "window-l2", "short-keys", "window-tiles")]

if __name__ == "__main__":
    with torch.no_grad():
        warm_up_clocks()
        for name in sys.argv[1:] or DEFAULT:
            SECTIONS[name]()
