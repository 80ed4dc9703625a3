"""fa4gen for PyTorch: FA4's `flash_attn_func` interface over fa4gen's C ABI (ctypes, no build
step). Kernels are ahead-of-time cubins: no JIT, no warm-up plan.

    from fa4gen import flash_attn_func, flash_attn_varlen_func
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    out, _ = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_q, max_seqlen_q=mq, page_table=pt,
                                    seqused_k=used_k, learnable_sink=sinks, softcap=30.0)

Finds the shared library at $FA4GEN_LIB, next to this package, or in the repository's
target/release/; the kernels at $FA4GEN_KERNELS, next to this package (kernels/), or in the
repository's generated/. FA4GEN_JIT=1 compiles kernels the library lacks at first use (a
libfa4gen built with the `jit` feature). Features fa4gen has not built raise NotImplementedError
naming the feature; nothing silently falls back.
"""
import ctypes
import math
import os
import pathlib
import threading

import torch

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_combine", "kernel_name", "set_programmatic_launch", "set_varlen_schedule", "set_sequence_splits",
           "set_combine_kernel", "FA4GenError"]

_HERE = pathlib.Path(__file__).resolve().parent
_REPO = _HERE.parent.parent
WINDOW_NONE = -(2**63)

OK, INVALID_ARGUMENT, UNSUPPORTED, KERNEL_MISSING, LIBRARY, CUDA, NO_DEVICE, INTERNAL = 0, 1, 2, 3, 4, 5, 6, 99


class FA4GenError(RuntimeError):
    """A failure reported by the fa4gen library (message from fa4gen_last_error)."""

    def __init__(self, status, message):
        super().__init__(f"fa4gen status {status}: {message}")
        self.status = status


class _Problem(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int64),
        ("seqlen_q", ctypes.c_int64),
        ("seqlen_k", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("head_dim_v", ctypes.c_int64),
        ("q_strides", ctypes.c_int64 * 3),
        ("k_strides", ctypes.c_int64 * 3),
        ("v_strides", ctypes.c_int64 * 3),
        ("o_strides", ctypes.c_int64 * 3),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("return_lse", ctypes.c_int32),
        ("pack_gqa", ctypes.c_int32),
        ("num_splits", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("has_sinks", ctypes.c_int32),
        ("total_q", ctypes.c_int64),
        ("total_k", ctypes.c_int64),
        ("has_seqused_q", ctypes.c_int32),
        ("has_seqused_k", ctypes.c_int32),
        ("page_size", ctypes.c_int64),
        ("num_pages", ctypes.c_int64),
        ("pages_per_seq", ctypes.c_int64),
        ("page_table_stride", ctypes.c_int64),
        ("tile_m", ctypes.c_int32),
        ("tile_n", ctypes.c_int32),
    ]


class _SeqPtrs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in
                ("cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "page_table", "sinks")]


_lock = threading.Lock()
_lib = None
_handles = {}


def _first_existing(paths):
    for p in paths:
        if p and pathlib.Path(p).exists():
            return str(p)
    return None


def _load():
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = _first_existing([os.environ.get("FA4GEN_LIB"), _HERE / "libfa4gen.so", _REPO / "target/release/libfa4gen.so"])
        if path is None:
            raise FA4GenError(LIBRARY, "libfa4gen.so not found: set FA4GEN_LIB or run `cargo build --release`")
        lib = ctypes.CDLL(path)
        lib.fa4gen_abi_version.restype = ctypes.c_uint32
        lib.fa4gen_last_error.restype = ctypes.c_char_p
        lib.fa4gen_open.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)]
        lib.fa4gen_workspace_bytes.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Problem), ctypes.POINTER(ctypes.c_uint64)]
        lib.fa4gen_workspace_bytes.restype = ctypes.c_int
        lib.fa4gen_enable_jit.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.fa4gen_enable_jit.restype = ctypes.c_int
        lib.fa4gen_set_programmatic_launch.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        lib.fa4gen_set_programmatic_launch.restype = ctypes.c_int
        if hasattr(lib, "fa4gen_set_varlen_schedule"):
            lib.fa4gen_set_varlen_schedule.argtypes = [ctypes.c_void_p, ctypes.c_int32]
            lib.fa4gen_set_varlen_schedule.restype = ctypes.c_int
        if hasattr(lib, "fa4gen_set_sequence_splits"):
            lib.fa4gen_set_sequence_splits.argtypes = [ctypes.c_void_p, ctypes.c_int32]
            lib.fa4gen_set_sequence_splits.restype = ctypes.c_int
        if hasattr(lib, "fa4gen_set_combine_kernel"):
            lib.fa4gen_set_combine_kernel.argtypes = [ctypes.c_void_p, ctypes.c_int32]
            lib.fa4gen_set_combine_kernel.restype = ctypes.c_int
        lib.fa4gen_supports.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Problem)]
        lib.fa4gen_kernel_name.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Problem), ctypes.c_char_p, ctypes.c_uint64]
        lib.fa4gen_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Problem)] + [ctypes.c_void_p] * 6
        lib.fa4gen_forward_ext.argtypes = ([ctypes.c_void_p, ctypes.POINTER(_Problem)] + [ctypes.c_void_p] * 5
                                           + [ctypes.POINTER(_SeqPtrs), ctypes.c_void_p, ctypes.c_uint64,
                                              ctypes.c_void_p])
        if hasattr(lib, "fa4gen_combine"):  # (added within ABI 2: an older library lacks it)
            lib.fa4gen_combine.argtypes = ([ctypes.c_void_p, ctypes.POINTER(_Problem), ctypes.c_uint32]
                                           + [ctypes.c_void_p] * 4 + [ctypes.POINTER(_SeqPtrs), ctypes.c_void_p])
            lib.fa4gen_combine.restype = ctypes.c_int
        for f in ("fa4gen_open", "fa4gen_supports", "fa4gen_kernel_name", "fa4gen_forward", "fa4gen_forward_ext"):
            getattr(lib, f).restype = ctypes.c_int
        if lib.fa4gen_abi_version() != 2:
            raise FA4GenError(LIBRARY, f"{path} has ABI {lib.fa4gen_abi_version()}, this package speaks 2")
        _lib = lib
        return lib


def _check(status):
    if status != OK:
        msg = _lib.fa4gen_last_error().decode(errors="replace")
        if status == INVALID_ARGUMENT:
            raise ValueError(msg)
        if status == UNSUPPORTED:
            raise NotImplementedError(msg)
        raise FA4GenError(status, msg)


def _handle(device):
    lib = _load()
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _lock:
        h = _handles.get(index)
        if h is None:
            root = _first_existing([os.environ.get("FA4GEN_KERNELS"), _HERE / "kernels", _REPO / "generated"])
            if root is None:
                raise FA4GenError(LIBRARY, "kernel directory not found: set FA4GEN_KERNELS to generated/")
            torch.cuda.init()  # the primary context the library shares with PyTorch
            out = ctypes.c_void_p()
            _check(lib.fa4gen_open(root.encode(), index, ctypes.byref(out)))
            if os.environ.get("FA4GEN_JIT") == "1":
                # Kernels no plan ships compile at first use (NVRTC), cached on disk.
                _check(lib.fa4gen_enable_jit(out, None))
            if os.environ.get("FA4GEN_PDL") == "0":
                # Forwards in plain stream order, not as programmatic dependents (the default).
                _check(lib.fa4gen_set_programmatic_launch(out, 0))
            if os.environ.get("FA4GEN_VARLEN_SCHEDULE") == "0" and hasattr(lib, "fa4gen_set_varlen_schedule"):
                # Varlen batches on the padded schedule (measuring), not the device's list.
                _check(lib.fa4gen_set_varlen_schedule(out, 0))
            shares = os.environ.get("FA4GEN_SEQUENCE_SPLITS")
            if shares is not None and hasattr(lib, "fa4gen_set_sequence_splits"):
                # Per-sequence split counts: 0 off (FA4's one count), else waves of units.
                _check(lib.fa4gen_set_sequence_splits(out, int(shares)))
            combine = os.environ.get("FA4GEN_COMBINE")
            if combine and hasattr(lib, "fa4gen_set_combine_kernel"):
                # Force one split-KV combine kernel (measuring): "row" (a CTA per row), "rows".
                if combine not in _COMBINE_KERNELS:
                    raise ValueError(f"FA4GEN_COMBINE={combine!r}: one of {sorted(_COMBINE_KERNELS)}")
                _check(lib.fa4gen_set_combine_kernel(out, _COMBINE_KERNELS[combine]))
            h = _handles[index] = out
    return h


_DTYPES = {torch.bfloat16: 0, torch.float16: 1}
_COMBINE_OUT = {**_DTYPES, torch.float32: 2}  # fa4gen_combine's output dtypes (FA4GEN_FP32: its output only)


def _not_built(name, value, default, issue):
    # (An empty list or tuple asks for nothing, as in FA4: aux_tensors=[].)
    if isinstance(value, (list, tuple)) and not value and default is None:
        return
    if value is not default and not (isinstance(default, (int, float)) and value == default):
        raise NotImplementedError(f"{name} is not built yet in fa4gen (issue {issue})")


def _prepare(t, name):
    """FA4's maybe_contiguous, plus fa4gen's 16-byte rule: a tensor whose last dim is not
    contiguous, whose other strides are not multiples of 8 elements or whose data is not
    16-byte aligned is copied."""
    if t.stride(-1) != 1 or any(s % 8 for s in t.stride()[:-1]) or t.data_ptr() % 16:
        t = t.contiguous()
    return t


def _int(name, value, bits):
    """`value` as an int that fits a signed `bits`-bit field: ctypes would wrap it silently
    (num_splits=2**32 + 4 read as 4)."""
    v = int(value)
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        raise ValueError(f"{name} = {value} does not fit the library's {bits}-bit field")
    return v


def _problem(shape, strides, softmax_scale, causal, window_size, pack_gqa, return_lse, num_splits):
    p = _Problem()
    b, sq, sk, h, hkv, d, dv, dtype = shape
    p.dtype = _DTYPES[dtype]
    p.batch, p.seqlen_q, p.seqlen_k, p.heads, p.heads_kv, p.head_dim, p.head_dim_v = b, sq, sk, h, hkv, d, dv
    for field, st in zip(("q_strides", "k_strides", "v_strides", "o_strides"), strides):
        getattr(p, field)[:] = st
    # The C ABI reads a scale <= 0 as "the default": refuse one here rather than replace it.
    if softmax_scale is not None and not (math.isfinite(float(softmax_scale)) and float(softmax_scale) > 0):
        raise ValueError(f"softmax_scale must be a finite value > 0 (or None for 1/sqrt(D)), got {softmax_scale}")
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    p.causal = int(bool(causal))
    wl, wr = window_size if window_size is not None else (None, None)
    p.window_left = WINDOW_NONE if wl is None else _int("window_size[0]", wl, 64)
    p.window_right = WINDOW_NONE if wr is None else _int("window_size[1]", wr, 64)
    p.return_lse = int(bool(return_lse))
    p.pack_gqa = -1 if pack_gqa is None else int(bool(pack_gqa))
    p.num_splits = _int("num_splits", num_splits, 32)
    p.total_q = p.total_k = -1
    return p


def _unsupported_hooks(qv, gather_kv_indices, **hooks):
    _not_built("qv (MLA absorbed)", qv, None, "for MLA")
    _not_built("gather_kv_indices", gather_kv_indices, None, "for sparse KV")
    for name, value in hooks.items():
        _not_built(name, value, None, "for FlexAttention-style hooks")


def _longest(cu_seqlens, bound):
    """The longest sequence of B + 1 offsets, a host int: one device sync, or, while the stream is
    being captured (no sync can run there), `bound` (the packed rows), which only sizes the grid
    and the heuristics' view of the call. Correct, not fast: a captured decode step without
    max_seqlen_q looks like a prefill of B queries (no decode tile, no per-sequence splits), so
    engines pass the values."""
    if cu_seqlens.shape[0] < 2:
        return 0
    with torch.cuda.device(cu_seqlens.device):
        if torch.cuda.is_current_stream_capturing():
            return bound
    return int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item())


def _host_int(name, value, device, bound):
    """A max_seqlen as a host int. Callers may pass a 0-dim or 1-element tensor (Hugging Face
    does): read on the host, one device sync for a GPU tensor, or, while the stream is being
    captured (no sync can run there), `bound` (the packed rows; None: as if absent), as FA4 bounds
    an absent one. Anything else must be an integer."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool:
        raise ValueError(f"{name} must be an int or a one-element integer tensor, got {value.dtype} "
                         f"of shape {tuple(value.shape)}")
    if value.is_cuda:
        with torch.cuda.device(device):
            if torch.cuda.is_current_stream_capturing():
                return bound
    return int(value.item())


def _check_tensor(name, t, dims):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor")
    if not t.is_cuda:
        raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
    if t.dim() != dims:
        raise ValueError(f"{name} must be {dims}-d, got shape {tuple(t.shape)}")


def _int32_vector(name, t, n, device):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1:
        raise ValueError(f"{name} must be a 1-d torch.int32 tensor")
    if t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")
    if t.shape[0] != n:
        raise ValueError(f"{name} must have {n} elements, got {t.shape[0]}")
    return t.contiguous()


def _run(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k,
         page_table, softmax_scale, causal, window_size, learnable_sink, softcap, num_splits, pack_gqa,
         return_lse, out, lse, tile_mn=None):
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, learnable_sink) if isinstance(t, torch.Tensor)):
        raise NotImplementedError("the backward pass is not built in fa4gen: call under torch.no_grad() "
                                  "or with tensors that do not require grad")
    q_packed, k_packed, paged = cu_seqlens_q is not None, cu_seqlens_k is not None, page_table is not None
    _check_tensor("q", q, 3 if q_packed else 4)
    _check_tensor("k", k, 3 if k_packed and not paged else 4)
    _check_tensor("v", v, k.dim())
    if paged and k_packed:
        raise ValueError("page_table and cu_seqlens_k cannot be used together")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in _DTYPES:
        raise ValueError(f"dtype {q.dtype} is not supported: use torch.bfloat16 or torch.float16")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    dev = q.device
    h, d = q.shape[-2:]
    hkv, dk = k.shape[-2:]
    dv = v.shape[-1]
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} disagree on their leading dims")
    if dk != d:
        raise ValueError(f"q head_dim {d} != k head_dim {dk}")
    if hkv == 0 or h % hkv:
        raise ValueError(f"heads ({h}) must be divisible by heads_kv ({hkv})")
    # Batch size: from whichever per-sequence array is given, else q's leading dim.
    if q_packed:
        b = cu_seqlens_q.shape[0] - 1 if isinstance(cu_seqlens_q, torch.Tensor) else -1
    elif k_packed:
        b = cu_seqlens_k.shape[0] - 1 if isinstance(cu_seqlens_k, torch.Tensor) else -1
    elif paged:
        b = page_table.shape[0] if isinstance(page_table, torch.Tensor) else -1
    else:
        b = q.shape[0]
    if b < 0:
        raise ValueError("cu_seqlens / page_table must be torch tensors")
    if not q_packed and q.shape[0] != b:
        raise ValueError(f"q has batch {q.shape[0]}, the sequence arrays say {b}")
    cu_seqlens_q = _int32_vector("cu_seqlens_q", cu_seqlens_q, b + 1, dev)
    cu_seqlens_k = _int32_vector("cu_seqlens_k", cu_seqlens_k, b + 1, dev)
    seqused_q = _int32_vector("seqused_q", seqused_q, b, dev)
    seqused_k = _int32_vector("seqused_k", seqused_k, b, dev)
    if q_packed:
        max_seqlen_q = _host_int("max_seqlen_q", max_seqlen_q, dev, q.shape[0])
        if max_seqlen_q is None:  # FA4 wants a host int: derived if absent (`_longest`)
            max_seqlen_q = _longest(cu_seqlens_q, q.shape[0])
        sq = int(max_seqlen_q)
    else:
        sq = q.shape[1]
    if paged:
        if not isinstance(page_table, torch.Tensor) or page_table.dtype != torch.int32 or page_table.dim() != 2:
            raise ValueError("page_table must be a 2-d torch.int32 tensor (batch, pages_per_seq)")
        if page_table.device != dev or page_table.stride(-1) != 1:
            raise ValueError(f"page_table must be on {dev} with a contiguous last dim")
        if page_table.shape[0] != b:
            raise ValueError(f"page_table has {page_table.shape[0]} rows, the batch is {b}")
        # Rows that share storage (a table broadcast over the batch: stride 0) are copied out:
        # the kernels read row b at b * stride, past a shorter allocation's end.
        if b > 1 and page_table.stride(0) < page_table.shape[1]:
            page_table = page_table.contiguous()
        num_pages, page_size = k.shape[0], k.shape[1]
        max_seqlen_k = _host_int("max_seqlen_k", max_seqlen_k, dev, None)
        sk = page_table.shape[1] * page_size
        # With seqused_k the kernels read each sequence's length on the device (the maps span
        # pages, not Sk), so a caller's max_seqlen_k can stand for Sk, as FA4's heuristics
        # use it: engines pass block tables as wide as the longest context the model takes.
        if seqused_k is not None and max_seqlen_k is not None and 0 < int(max_seqlen_k) < sk:
            sk = int(max_seqlen_k)
    elif k_packed:
        max_seqlen_k = _host_int("max_seqlen_k", max_seqlen_k, dev, k.shape[0])
        if max_seqlen_k is None:
            max_seqlen_k = _longest(cu_seqlens_k, k.shape[0])
        sk = int(max_seqlen_k)
    else:
        if k.shape[0] != b:
            raise ValueError(f"k has batch {k.shape[0]}, q {b}")
        sk = k.shape[1]
    q, k, v = (_prepare(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    o_shape = (q.shape[0], h, dv) if q_packed else (b, sq, h, dv)
    if out is None:
        out = torch.empty(o_shape, dtype=q.dtype, device=dev)
    elif tuple(out.shape) != o_shape or out.dtype != q.dtype or out.device != dev or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {q.dtype} tensor of shape {o_shape} on {dev}")
    lse_shape = (h, q.shape[0]) if q_packed else (b, h, sq)
    if return_lse:
        if lse is None:
            lse = torch.empty(lse_shape, dtype=torch.float32, device=dev)
        elif tuple(lse.shape) != lse_shape or lse.dtype != torch.float32 or lse.device != dev or not lse.is_contiguous():
            raise ValueError(f"lse must be a contiguous float32 tensor of shape {lse_shape} on {dev}")
    else:
        lse = None
    sinks = None
    if learnable_sink is not None:
        if not isinstance(learnable_sink, torch.Tensor) or tuple(learnable_sink.shape) != (h,):
            raise ValueError(f"learnable_sink must be a tensor of shape ({h},)")
        if learnable_sink.dtype not in (torch.float32, torch.bfloat16, torch.float16) or learnable_sink.device != dev:
            raise ValueError(f"learnable_sink must be fp32/bf16/fp16 on {dev}")
        sinks = learnable_sink.to(torch.float32).contiguous()
    s4 = lambda t: (0,) + tuple(t.stride()) if t.dim() == 3 else tuple(t.stride())[:3]  # noqa: E731
    p = _problem((b, sq, sk, h, hkv, d, dv, q.dtype), (s4(q)[:3], s4(k)[:3], s4(v)[:3], s4(out)[:3]),
                 softmax_scale, causal, window_size, pack_gqa, return_lse, num_splits)
    if tile_mn is not None:
        p.tile_m, p.tile_n = _int("tile_mn[0]", tile_mn[0], 32), _int("tile_mn[1]", tile_mn[1], 32)
    p.softcap = float(softcap or 0.0)
    p.has_sinks = int(sinks is not None)
    if q_packed:
        p.total_q = q.shape[0]
    if k_packed:
        p.total_k = k.shape[0]
    p.has_seqused_q = int(seqused_q is not None)
    p.has_seqused_k = int(seqused_k is not None)
    if paged:
        p.page_size, p.num_pages = page_size, num_pages
        p.pages_per_seq, p.page_table_stride = page_table.shape[1], page_table.stride(0)
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
    extra = _SeqPtrs(ptr(cu_seqlens_q), ptr(cu_seqlens_k), ptr(seqused_q), ptr(seqused_k), ptr(page_table), ptr(sinks))
    handle = _handle(dev)
    stream = torch.cuda.current_stream(dev).cuda_stream
    # Split-KV scratch (and the split tail's, which unsplit calls may use) from PyTorch's
    # allocator: stream-ordered, and inside CUDA graph capture it comes from the graph's pool.
    # The handle's own per-stream workspace cannot grow while a stream is captured, and torch
    # captures on a stream of its own: an unsplit call captured without one ran without its
    # split tail (unmasked, Sq 768 over 8k: 0.19 against 0.155 ms).
    ws, ws_bytes = None, 0
    with torch.cuda.device(dev):
        capturing = torch.cuda.is_current_stream_capturing()
    if num_splits != 1 or capturing:
        need = ctypes.c_uint64(0)
        _check(_lib.fa4gen_workspace_bytes(handle, ctypes.byref(p), ctypes.byref(need)))
        if need.value:
            ws = torch.empty(need.value, dtype=torch.uint8, device=dev)
            ws_bytes = need.value
    _check(_lib.fa4gen_forward_ext(handle, ctypes.byref(p), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                   lse.data_ptr() if lse is not None else None, ctypes.byref(extra),
                                   ws.data_ptr() if ws is not None else None, ws_bytes, stream))
    return out, lse


def flash_attn_func(
    q,
    k,
    v,
    qv=None,
    gather_kv_indices=None,
    softmax_scale=None,
    causal=False,
    window_size=(None, None),
    learnable_sink=None,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    score_mod=None,
    score_mod_bwd=None,
    mask_mod=None,
    aux_tensors=None,
    aux_scalars=None,
    block_sparse_tensors=None,
    block_sparse_tensors_bwd=None,
    return_lse=False,
    *,
    out=None,
    lse=None,
    tile_mn=None,
):
    """Attention forward with flash_attn.cute's signature and return convention:
    q (B, Sq, H, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv) -> (out (B, Sq, H, Dv), lse (B, H, Sq)
    fp32 or None). `out=` / `lse=` optionally receive preallocated outputs (contiguous);
    `tile_mn=(m, n)` forces a tile (FA4's internal tuning knob). `deterministic`, `score_mod_bwd`
    and `block_sparse_tensors_bwd` are FA4's backward's: accepted and unused (no backward here)."""
    _unsupported_hooks(qv, gather_kv_indices, score_mod=score_mod, mask_mod=mask_mod, aux_tensors=aux_tensors,
                       aux_scalars=aux_scalars, block_sparse_tensors=block_sparse_tensors)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, 4)
    return _run(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, seqused_q=None,
                seqused_k=None, page_table=None, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                learnable_sink=learnable_sink, softcap=softcap, num_splits=num_splits, pack_gqa=pack_gqa,
                return_lse=return_lse, out=out, lse=lse, tile_mn=tile_mn)


def flash_attn_varlen_func(
    q,
    k,
    v,
    qv=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    min_seqlen_k=None,
    seqused_q=None,
    seqused_k=None,
    gather_kv_indices=None,
    page_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(None, None),
    learnable_sink=None,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    score_mod=None,
    score_mod_bwd=None,
    mask_mod=None,
    block_sparse_tensors=None,
    aux_tensors=None,
    aux_scalars=None,
    return_lse=False,
    scheduler_metadata=None,
    seqlen_k_per_split=None,
    disable_scheduler_metadata=False,
    *,
    out=None,
    lse=None,
    tile_mn=None,
):
    """flash_attn.cute's varlen entry point: q (total_q, H, D) with cu_seqlens_q (or batched with
    seqused_q), k/v (total_k, Hkv, D) with cu_seqlens_k, batched with seqused_k, or paged
    (num_pages, page_size, Hkv, D) with page_table (B, pages_per_seq). Returns (out, lse) with out
    shaped like q (Dv last) and lse (H, total_q) or (B, H, Sq). max_seqlen_* should be host ints
    (one-element tensors are read on the host; derived with one device sync when omitted; while
    the stream is being captured, where a sync cannot run, an omitted one or one on the device is
    bounded by the packed rows: total_q, total_k), each at least every
    sequence's length, as in FA2 and FA3: max_seqlen_q sizes the grid, and rows past it are not
    computed. `deterministic` and
    `score_mod_bwd` are FA4's backward's: accepted and unused; `min_seqlen_k` and
    `disable_scheduler_metadata` are hints this library does not need."""
    _unsupported_hooks(qv, gather_kv_indices, score_mod=score_mod, mask_mod=mask_mod,
                       aux_tensors=aux_tensors, aux_scalars=aux_scalars, block_sparse_tensors=block_sparse_tensors,
                       scheduler_metadata=scheduler_metadata, seqlen_k_per_split=seqlen_k_per_split)
    return _run(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                max_seqlen_k=max_seqlen_k, seqused_q=seqused_q, seqused_k=seqused_k, page_table=page_table,
                softmax_scale=softmax_scale, causal=causal, window_size=window_size, learnable_sink=learnable_sink,
                softcap=softcap, num_splits=num_splits, pack_gqa=pack_gqa, return_lse=return_lse, out=out, lse=lse,
                tile_mn=tile_mn)


def _flash_attn_fwd(
    q,
    k,
    v,
    qv=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    seqused_q=None,
    seqused_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    min_seqlen_k=None,
    page_table=None,
    softmax_scale=None,
    causal=False,
    softcap=None,
    window_size_left=None,
    window_size_right=None,
    learnable_sink=None,
    tile_mn=None,
    mma_pv_is_rs=None,
    intra_wg_overlap=None,
    num_threads=384,
    num_splits=1,
    pack_gqa=None,
    _arch=None,
    score_mod=None,
    mask_mod=None,
    block_sparse_tensors=None,
    return_lse=False,
    out=None,
    lse=None,
    aux_tensors=None,
    aux_scalars=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    gather_kv_indices=None,
    scheduler_metadata=None,
    seqlen_k_per_split=None,
    disable_scheduler_metadata=False,
):
    """flash_attn.cute.interface._flash_attn_fwd, the entry point engines call beneath the public
    functions, with its signature and return convention: (out, lse, None, None). Batched or
    varlen or paged by the arguments given, as flash_attn_varlen_func. As in FA4, an `lse=`
    buffer is written and returned whether or not return_lse is set. `mma_pv_is_rs`,
    `intra_wg_overlap`, `num_threads` and `_arch` tune FA4's own kernels: accepted and unused
    (selection picks this library's kernels; `tile_mn` is honoured). q/k/v_descale are FP8's,
    which is not built: they must be None, as FA4 requires for 16-bit inputs."""
    for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        _not_built(name, t, None, "for FP8 inputs")
    _unsupported_hooks(qv, gather_kv_indices, score_mod=score_mod, mask_mod=mask_mod, aux_tensors=aux_tensors,
                       aux_scalars=aux_scalars, block_sparse_tensors=block_sparse_tensors,
                       scheduler_metadata=scheduler_metadata, seqlen_k_per_split=seqlen_k_per_split)
    o, l = _run(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                max_seqlen_k=max_seqlen_k, seqused_q=seqused_q, seqused_k=seqused_k, page_table=page_table,
                softmax_scale=softmax_scale, causal=causal, window_size=(window_size_left, window_size_right),
                learnable_sink=learnable_sink, softcap=softcap, num_splits=num_splits, pack_gqa=pack_gqa,
                return_lse=bool(return_lse) or lse is not None, out=out, lse=lse, tile_mn=tile_mn)
    return o, l, None, None


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None, cu_seqlens=None, seqused=None,
                       virtual_batch_idx=None, return_lse=True, max_seqlen_q=None):
    """flash_attn.cute's split-KV combine: reduce partial outputs and their LSEs over the splits.
    out_partial (S_, B, Sq, H, Dv) or, rows packed, (S_, total_q, H, Dv); lse_partial (S_, B, Sq, H)
    or (S_, total_q, H), natural log (FA4's layout: a transposed view of (S_, B, H, Sq) storage
    is read in place, anything else copied once; partials other than fp32 are converted).
    Returns (out (B, Sq, H, Dv) or (total_q, H, Dv), lse (B, Sq, H) or (total_q, H) as a
    transposed view of (B, H, Sq) / (H, total_q) storage, or None). Packed rows without
    cu_seqlens are one sequence; cu_seqlens (int32, B + 1) splits them into B (max_seqlen_q, a
    host int, saves one device sync) and seqused (int32, B) caps each sequence's rows (rows past
    it are not written). The output's dtype is `out`'s, else `out_dtype`, else the partials'
    (FA4's default: fp32 for fp32 partials): bf16, fp16 or fp32. Dv a multiple of 8 up to 256,
    or of 16 up to 512 (MLA decode's; rows past 256 columns are reduced as two halves).
    virtual_batch_idx (int32, B), as FA4: without cu_seqlens and seqused, batch
    virtual_batch_idx[z] is combined for z in 0..B, so the batches it lists are written and the
    others left as they are (an index outside 0..B lists none); with either, it is ignored."""
    if not isinstance(out_partial, torch.Tensor) or not isinstance(lse_partial, torch.Tensor):
        raise TypeError("out_partial and lse_partial must be torch.Tensors")
    packed = out_partial.dim() == 4
    if out_partial.dim() not in (4, 5):
        raise ValueError(f"out_partial must be (splits, B, Sq, H, Dv) or (splits, total_q, H, Dv), "
                         f"got shape {tuple(out_partial.shape)}")
    if not out_partial.is_cuda or lse_partial.device != out_partial.device:
        raise ValueError("out_partial and lse_partial must be on one CUDA device")
    dev = out_partial.device
    splits, h, dv = out_partial.shape[0], out_partial.shape[-2], out_partial.shape[-1]
    rows = tuple(out_partial.shape[1:-2])  # (B, Sq) or (total_q,)
    if tuple(lse_partial.shape) != (splits,) + rows + (h,):
        raise ValueError(f"lse_partial must have shape {(splits,) + rows + (h,)}, got {tuple(lse_partial.shape)}")
    if out is not None and not isinstance(out, torch.Tensor):
        raise ValueError("out must be a torch.Tensor or None")
    if out is not None:  # FA4: a given out is written in its own dtype, whatever out_dtype says
        out_dtype = out.dtype
    elif out_dtype is None:
        out_dtype = out_partial.dtype
    if out_dtype not in _COMBINE_OUT:
        raise NotImplementedError(f"output dtype {out_dtype} is not built in fa4gen: bf16, fp16 and fp32 are")
    if packed:
        total_q = rows[0]
        if cu_seqlens is not None:
            if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1:
                raise ValueError("cu_seqlens must be a 1-d torch.int32 tensor of B + 1 offsets")
            b = cu_seqlens.shape[0] - 1
            cu_seqlens = _int32_vector("cu_seqlens", cu_seqlens, b + 1, dev)
            if max_seqlen_q is None:
                max_seqlen_q = _longest(cu_seqlens, total_q)
            sq = int(max_seqlen_q)
        else:  # FA4: packed rows without offsets are one sequence
            b, sq = 1, total_q
    else:
        if cu_seqlens is not None:
            raise ValueError("cu_seqlens goes with packed (splits, total_q, H, Dv) partials")
        b, sq = rows
    if virtual_batch_idx is not None and cu_seqlens is None and seqused is None:
        vbi = _int32_vector("virtual_batch_idx", virtual_batch_idx, b, dev)
        # Written rows: every row of a listed batch, none of another (as seqused 0), worked out
        # on the device (no sync; graph-capturable), an out-of-range index clamped and then
        # discounted rather than read out of bounds.
        listed = torch.zeros(b, dtype=torch.int32, device=dev).scatter_reduce_(
            0, vbi.long().clamp(0, max(b - 1, 0)), ((vbi >= 0) & (vbi < b)).to(torch.int32), reduce="amax")
        seqused = listed * sq
    seqused = _int32_vector("seqused", seqused, b, dev)
    if not 1 <= splits <= 256:
        raise ValueError(f"num_splits (out_partial's first dim) must be 1..256, got {splits}")
    o_part = out_partial.to(torch.float32).contiguous()
    # The library's LSE layout per split is (B, H, Sq) / (H, total_q): FA4's (S_, ..., H) views
    # of it transpose back in place.
    l_part = lse_partial.to(torch.float32).transpose(-1, -2).contiguous()
    o_shape = rows + (h, dv)
    if out is None:
        out = torch.empty(o_shape, dtype=out_dtype, device=dev)
    elif tuple(out.shape) != o_shape or out.device != dev or out.stride(-1) != 1:
        raise ValueError(f"out must be a tensor of shape {o_shape} on {dev} with a contiguous last dim")
    lse = None
    if return_lse:
        lse = torch.empty((h, total_q) if packed else (b, h, sq), dtype=torch.float32, device=dev)
    strides = (0,) + tuple(out.stride()) if packed else tuple(out.stride())[:3]
    p = _problem((b, sq, sq, h, h, dv, dv, torch.bfloat16), ((0, 0, 0), (0, 0, 0), (0, 0, 0), strides[:3]),
                 None, False, (None, None), False, return_lse, splits)
    p.dtype = _COMBINE_OUT[out_dtype]  # the output's dtype; for fp32 the library picks a 16-bit module
    # The K side is validated, never read: contiguous strides of a (B, Sq, H, Dv) tensor.
    for field in ("q_strides", "k_strides", "v_strides"):
        getattr(p, field)[:] = (sq * h * dv, h * dv, dv)
    if packed and cu_seqlens is not None:
        p.total_q = total_q
    p.has_seqused_q = int(seqused is not None)
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731
    extra = _SeqPtrs(ptr(cu_seqlens), None, ptr(seqused), None, None, None)
    handle = _handle(dev)
    if not hasattr(_lib, "fa4gen_combine"):
        raise FA4GenError(LIBRARY, "this libfa4gen predates fa4gen_combine: rebuild it (cargo build --release)")
    stream = torch.cuda.current_stream(dev).cuda_stream
    _check(_lib.fa4gen_combine(handle, ctypes.byref(p), splits, o_part.data_ptr(), l_part.data_ptr(), out.data_ptr(),
                               lse.data_ptr() if lse is not None else None, ctypes.byref(extra), stream))
    return out, (lse.transpose(-1, -2) if lse is not None else None)


_COMBINE_KERNELS = {"auto": 0, "row": 1, "rows": 2}


def set_combine_kernel(kernel, device=None):
    """Which kernel reduces split-KV partials on `device`: "auto" (by shape, the default),
    "row" (one CTA per (query, head) row) or "rows" (a group of lanes per row); the
    `FA4GEN_COMBINE` variable sets it when a process opens the device."""
    if kernel not in _COMBINE_KERNELS:
        raise ValueError(f"combine kernel {kernel!r}: one of {sorted(_COMBINE_KERNELS)}")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    h = _handle(dev)
    if not hasattr(_lib, "fa4gen_set_combine_kernel"):
        raise FA4GenError(LIBRARY, "this libfa4gen predates fa4gen_set_combine_kernel: rebuild it")
    _check(_lib.fa4gen_set_combine_kernel(h, _COMBINE_KERNELS[kernel]))


def set_varlen_schedule(on, device=None):
    """Deal varlen batches of more than one sequence by the device's list of their tiles,
    heaviest first (on, the default; `FA4GEN_VARLEN_SCHEDULE=0` starts a process off), or by the
    padded schedule, every sequence as the longest (off), on `device` (default: the current
    one). The results are the same; off is for measuring."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    h = _handle(dev)  # (loads the library first)
    if not hasattr(_lib, "fa4gen_set_varlen_schedule"):
        raise FA4GenError(LIBRARY, "this libfa4gen.so predates fa4gen_set_varlen_schedule: rebuild it")
    _check(_lib.fa4gen_set_varlen_schedule(h, 1 if on else 0))


def set_sequence_splits(shares, device=None):
    """Give each sequence of a split varlen batch its own split count on the device: the
    grid holds `shares` waves of CTA slots' worth of (sequence, split) units (4 by default, on
    decode batches of mixed key lengths; `FA4GEN_SEQUENCE_SPLITS=n` starts a process with n),
    one per sequence and the rest dealt by the sequences' K blocks, at most the call's count
    each; 0: FA4's one count for every sequence, on `device` (default: the current one).
    Same results up to the combine's rounding; other values are for measuring."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    h = _handle(dev)  # (loads the library first)
    if not hasattr(_lib, "fa4gen_set_sequence_splits"):
        raise FA4GenError(LIBRARY, "this libfa4gen.so predates fa4gen_set_sequence_splits: rebuild it")
    _check(_lib.fa4gen_set_sequence_splits(h, int(shares)))


def set_programmatic_launch(on, device=None):
    """Launch short calls (decode, sliding windows, small prefill) as programmatic dependents of
    the kernel before them on the stream (on, the default; `FA4GEN_PDL=0` starts a process
    off), or every call in plain stream order (off), on `device` (default: the current one)."""
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    h = _handle(dev)  # (loads the library first)
    _check(_lib.fa4gen_set_programmatic_launch(h, 1 if on else 0))


def kernel_name(q, k, v, causal=False, window_size=(None, None), pack_gqa=None, return_lse=False, tile_mn=None,
                learnable_sink=None, softcap=0.0, num_splits=1):
    """The stem of the kernel flash_attn_func would run for these (batched) tensors."""
    b, sq, h, d = q.shape
    _, sk, hkv, dv = v.shape
    p = _problem((b, sq, sk, h, hkv, d, dv, q.dtype),
                 (q.stride()[:3], k.stride()[:3], v.stride()[:3], (sq * h * dv, h * dv, dv)),
                 None, causal, window_size, pack_gqa, return_lse, num_splits)
    p.total_q = p.total_k = -1
    p.has_sinks = int(learnable_sink is not None)
    p.softcap = float(softcap or 0.0)
    if tile_mn is not None:
        p.tile_m, p.tile_n = int(tile_mn[0]), int(tile_mn[1])
    buf = ctypes.create_string_buffer(256)
    _check(_load().fa4gen_kernel_name(_handle(q.device), ctypes.byref(p), buf, 256))
    return buf.value.decode()
