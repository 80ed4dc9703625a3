"""fa4gen for PyTorch: FA4's `flash_attn_func` interface over fa4gen's C ABI (ctypes, no build
step). Kernels are ahead-of-time cubins: no JIT, no warm-up plan.

    from fa4gen import flash_attn_func
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)

Finds the shared library at $FA4GEN_LIB, next to this package, or in the repository's
target/release/; the kernels at $FA4GEN_KERNELS, next to this package (kernels/), or in the
repository's generated/. Features fa4gen has not built yet raise NotImplementedError naming
the feature; nothing silently falls back.
"""
import ctypes
import os
import pathlib
import threading

import torch

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "kernel_name", "FA4GenError"]

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
    ]


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
        lib.fa4gen_supports.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Problem)]
        lib.fa4gen_kernel_name.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Problem), ctypes.c_char_p, ctypes.c_uint64]
        lib.fa4gen_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Problem)] + [ctypes.c_void_p] * 6
        for f in ("fa4gen_open", "fa4gen_supports", "fa4gen_kernel_name", "fa4gen_forward"):
            getattr(lib, f).restype = ctypes.c_int
        if lib.fa4gen_abi_version() != 1:
            raise FA4GenError(LIBRARY, f"{path} has ABI {lib.fa4gen_abi_version()}, this package speaks 1")
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
            h = _handles[index] = out
    return h


_DTYPES = {torch.bfloat16: 0, torch.float16: 1}


def _not_built(name, value, default, issue):
    if value is not default and not (isinstance(default, (int, float)) and value == default):
        raise NotImplementedError(f"{name} is not built yet in fa4gen (issue {issue})")


def _prepare(t, name):
    """FA4's maybe_contiguous, plus fa4gen's 16-byte rule: a tensor whose last dim is not
    contiguous, whose other strides are not multiples of 8 elements or whose data is not
    16-byte aligned is copied."""
    if t.stride(-1) != 1 or any(s % 8 for s in t.stride()[:-1]) or t.data_ptr() % 16:
        t = t.contiguous()
    return t


def _problem(q, k, v, o_strides, softmax_scale, causal, window_size, pack_gqa, return_lse, num_splits):
    p = _Problem()
    b, sq, h, d = q.shape
    _, sk, hkv, dv = v.shape
    p.dtype = _DTYPES[q.dtype]
    p.batch, p.seqlen_q, p.seqlen_k, p.heads, p.heads_kv, p.head_dim, p.head_dim_v = b, sq, sk, h, hkv, d, dv
    for field, strides in (("q_strides", q.stride()), ("k_strides", k.stride()), ("v_strides", v.stride()),
                           ("o_strides", o_strides)):
        getattr(p, field)[:] = strides[:3]
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    p.causal = int(bool(causal))
    wl, wr = window_size if window_size is not None else (None, None)
    p.window_left = WINDOW_NONE if wl is None else int(wl)
    p.window_right = WINDOW_NONE if wr is None else int(wr)
    p.return_lse = int(bool(return_lse))
    p.pack_gqa = -1 if pack_gqa is None else int(bool(pack_gqa))
    p.num_splits = int(num_splits)
    return p


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
    block_sparse_tensors=None,
    block_sparse_tensors_bwd=None,
    return_lse=False,
    *,
    out=None,
    lse=None,
):
    """Attention forward with flash_attn.cute's signature and return convention:
    q (B, Sq, H, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv) -> (out (B, Sq, H, Dv), lse (B, H, Sq)
    fp32 or None). `out=` / `lse=` optionally receive preallocated outputs (contiguous)."""
    _not_built("learnable_sink", learnable_sink, None, 5)
    _not_built("softcap", softcap, 0.0, 5)
    _not_built("qv (MLA absorbed)", qv, None, "for MLA")
    _not_built("gather_kv_indices", gather_kv_indices, None, "for sparse KV")
    for name, value in (("score_mod", score_mod), ("score_mod_bwd", score_mod_bwd), ("mask_mod", mask_mod),
                        ("aux_tensors", aux_tensors), ("block_sparse_tensors", block_sparse_tensors),
                        ("block_sparse_tensors_bwd", block_sparse_tensors_bwd)):
        _not_built(name, value, None, "for FlexAttention-style hooks")
    if num_splits > 1:
        raise NotImplementedError("split-KV (num_splits > 1) is not built yet in fa4gen (issue 6)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError("the backward pass is not built in fa4gen: call under torch.no_grad() "
                                  "or with tensors that do not require grad")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor")
        if not t.is_cuda:
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-d (batch, seqlen, heads, head_dim), got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in _DTYPES:
        raise ValueError(f"dtype {q.dtype} is not supported: use torch.bfloat16 or torch.float16")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    b, sq, h, d = q.shape
    bk, sk, hkv, dk = k.shape
    bv, skv, hkv_v, dv = v.shape
    if bk != b or bv != b:
        raise ValueError(f"batch sizes differ: q {b}, k {bk}, v {bv}")
    if skv != sk or hkv_v != hkv:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} disagree on seqlen_k or heads_kv")
    if dk != d:
        raise ValueError(f"q head_dim {d} != k head_dim {dk}")
    if hkv == 0 or h % hkv:
        raise ValueError(f"heads ({h}) must be divisible by heads_kv ({hkv})")
    q, k, v = (_prepare(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    if out is None:
        out = torch.empty((b, sq, h, dv), dtype=q.dtype, device=q.device)
    elif out.shape != (b, sq, h, dv) or out.dtype != q.dtype or out.device != q.device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {q.dtype} tensor of shape {(b, sq, h, dv)} on {q.device}")
    if return_lse:
        if lse is None:
            lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
        elif lse.shape != (b, h, sq) or lse.dtype != torch.float32 or lse.device != q.device or not lse.is_contiguous():
            raise ValueError(f"lse must be a contiguous float32 tensor of shape {(b, h, sq)} on {q.device}")
    else:
        lse = None
    p = _problem(q, k, v, out.stride(), softmax_scale, causal, window_size, pack_gqa, return_lse, num_splits)
    handle = _handle(q.device)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    _check(_lib.fa4gen_forward(handle, ctypes.byref(p), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                               lse.data_ptr() if lse is not None else None, stream))
    return out, lse


def kernel_name(q, k, v, causal=False, window_size=(None, None), pack_gqa=None, return_lse=False):
    """The stem of the kernel flash_attn_func would run for these tensors."""
    b, sq, h, _ = q.shape
    dv = v.shape[-1]
    p = _problem(q, k, v, (sq * h * dv, h * dv, dv), None, causal, window_size, pack_gqa, return_lse, 1)
    buf = ctypes.create_string_buffer(256)
    _check(_load().fa4gen_kernel_name(_handle(q.device), ctypes.byref(p), buf, 256))
    return buf.value.decode()


def flash_attn_varlen_func(q, k, v, *args, **kwargs):
    """flash_attn.cute's varlen entry point: not built yet."""
    raise NotImplementedError("varlen attention (cu_seqlens / seqused / page_table) is not built yet in fa4gen (issue 5)")
