/* fa4gen C ABI: ahead-of-time FlashAttention kernels, selected and launched on raw device
 * pointers. Link against libfa4gen.so (cargo build --release). Thread-safe: one handle may be
 * used from several threads; errors are reported per thread.
 *
 * Conventions (FA4's): q (B, Sq, H, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv), out (B, Sq, H, Dv),
 * lse (B, H, Sq) fp32 natural log. Strides are in elements, as {batch, row, head}; the last dim
 * must be contiguous and every stride a multiple of 8 elements (16-byte rows; 32-byte for
 * fa4gen_combine's fp32 out). Causal and windows are bottom-right aligned; rows that see no
 * key give 0 and LSE -inf (the sink's logit with sinks).
 *
 * Serving features (ABI 2), FA4's varlen conventions: with total_q >= 0, q/out are packed
 * (total_q, H, D) rows addressed through cu_seqlens_q (int32, B+1) and the LSE is (H, total_q);
 * likewise total_k with cu_seqlens_k for k/v. seqused_q/k (int32, B) cap each sequence's length.
 * batch is then the number of sequences and seqlen_q/seqlen_k the longest (host integers).
 * Paged K/V (page_size > 0): k/v are (num_pages, page_size, Hkv, D) (batch stride = page stride)
 * and key j of sequence b lives in page page_table[b * page_table_stride + j / page_size];
 * without seqused_k every sequence has seqlen_k keys. Sinks: fp32 (H) logits in the softmax
 * denominator. softcap > 0: scores c * tanh(scale * qk / c). num_splits: 1 unsplit, > 1 exactly
 * that many K ranges (<= 256), < 1 FA4's heuristic; split calls (and long unmasked calls on sm90,
 * whose last round of tiles is split, and varlen batches on sm90, whose tiles a list on the
 * device orders) use a scratch workspace (see fa4gen_workspace_bytes) that the handle keeps per
 * stream unless the caller passes one.
 *
 * Every call validates its arguments completely before launching anything; a failed call
 * launches nothing and leaves a message for fa4gen_last_error(). No call ever unwinds or aborts
 * across this boundary. */
#ifndef FA4GEN_H
#define FA4GEN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FA4GEN_ABI_VERSION 2u

/* Status codes. */
typedef enum fa4gen_status {
  FA4GEN_OK = 0,
  FA4GEN_ERR_INVALID_ARGUMENT = 1, /* a field, pointer, stride or buffer is wrong: the message names it */
  FA4GEN_ERR_UNSUPPORTED = 2,      /* valid, but no kernel fa4gen can build serves it (or a feature not built yet) */
  FA4GEN_ERR_KERNEL_MISSING = 3,   /* the kernel exists in principle but the library on disk lacks it */
  FA4GEN_ERR_LIBRARY = 4,          /* kernel directory, manifest or cubin unusable (missing, corrupt, hash mismatch, wrong arch) */
  FA4GEN_ERR_CUDA = 5,             /* a CUDA driver call failed */
  FA4GEN_ERR_NO_DEVICE = 6,        /* no CUDA driver, no such device, or a device fa4gen does not build for */
  FA4GEN_ERR_INTERNAL = 99         /* a bug in fa4gen (caught panic): please report the message */
} fa4gen_status;

/* FA4GEN_FP32 only as fa4gen_combine's output (FA4's flash_attn_combine default for fp32 partials). */
typedef enum fa4gen_dtype { FA4GEN_BF16 = 0, FA4GEN_FP16 = 1, FA4GEN_FP32 = 2 } fa4gen_dtype;

/* An unbounded window side. */
#define FA4GEN_WINDOW_NONE INT64_MIN

/* One attention call. fa4gen_problem_init() fills contiguous strides and FA4's defaults. */
typedef struct fa4gen_problem {
  int32_t dtype; /* fa4gen_dtype */
  int64_t batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim, head_dim_v;
  int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3]; /* {batch, row, head}, elements */
  float softmax_scale;                 /* <= 0: 1/sqrt(head_dim) */
  int32_t causal;                      /* 0 or 1 */
  int64_t window_left, window_right;   /* FA4GEN_WINDOW_NONE = unbounded */
  int32_t return_lse;                  /* 0 or 1 */
  int32_t pack_gqa;                    /* -1: default (on when heads > heads_kv), 0, 1 */
  int32_t num_splits;                  /* 1: no split; > 1: that many (<= 256); < 1: heuristic */
  /* ABI 2: serving features (fa4gen_problem_init turns them all off). */
  float softcap;                       /* 0: off */
  int32_t has_sinks;                   /* 0 or 1: fa4gen_seq_ptrs.sinks is passed */
  int64_t total_q, total_k;            /* -1: batched; >= 0: packed rows with cu_seqlens_q / _k */
  int32_t has_seqused_q, has_seqused_k;/* 0 or 1 */
  int64_t page_size;                   /* 0: not paged */
  int64_t num_pages, pages_per_seq, page_table_stride; /* paged; stride <= 0: pages_per_seq; at most 2^31 - 1 */
  int32_t tile_m, tile_n;              /* FA4's tile_mn override for tuning; 0, 0: the tile table */
} fa4gen_problem;

/* The serving features' device arrays; NULL where the problem does not declare them. */
typedef struct fa4gen_seq_ptrs {
  const int32_t* cu_seqlens_q; /* (B+1) */
  const int32_t* cu_seqlens_k; /* (B+1) */
  const int32_t* seqused_q;    /* (B) */
  const int32_t* seqused_k;    /* (B) */
  const int32_t* page_table;   /* (B, pages_per_seq), row stride page_table_stride */
  const float* sinks;          /* (H) */
} fa4gen_seq_ptrs;

typedef struct fa4gen_handle fa4gen_handle;

uint32_t fa4gen_abi_version(void);

/* Message of the last failed call on this thread ("" if none). Valid until the next call. */
const char* fa4gen_last_error(void);

/* Contiguous strides and defaults (scale auto, no mask, no LSE, pack_gqa default, 1 split). */
void fa4gen_problem_init(fa4gen_problem* p, int32_t dtype, int64_t batch, int64_t seqlen_q,
                         int64_t seqlen_k, int64_t heads, int64_t heads_kv, int64_t head_dim,
                         int64_t head_dim_v);

/* Open the kernel library for CUDA device `device` (its primary context, as the CUDA runtime and
 * PyTorch use). `kernels_root` holds one directory per arch family (generated/ after
 * `cargo xtask gen`): the one for the device is chosen. */
fa4gen_status fa4gen_open(const char* kernels_root, int32_t device, fa4gen_handle** out);
void fa4gen_close(fa4gen_handle* h);

/* Compile kernels the library lacks at first use (NVRTC, cached on disk in cache_dir; NULL:
 * $FA4GEN_CACHE_DIR or ~/.cache/fa4gen). FA4GEN_ERR_UNSUPPORTED when the library was built
 * without the `jit` feature. Call before sharing the handle between threads. */
fa4gen_status fa4gen_enable_jit(fa4gen_handle* h, const char* cache_dir);

/* Launch short forwards (decode, sliding windows, small prefill: at most 128 K blocks per CTA
 * slot, no causal runs) as programmatic dependents of the kernel before them on the stream
 * (on != 0, the default): their CTAs start and set up while that kernel finishes, and wait for
 * it (griddepcontrol.wait) before touching global memory. 0: every forward in stream order. */
fa4gen_status fa4gen_set_programmatic_launch(const fa4gen_handle* h, int32_t on);

/* Deal varlen batches of more than one sequence by a list of their real (sequence, Q block)
 * tiles, heaviest first, made on the device by a one-CTA kernel launched just before the
 * forward (on != 0, the default; it takes a workspace slot: fa4gen_workspace_bytes counts it),
 * or by the padded schedule, every sequence as the longest (0). Same results; 0 is for measuring. */
fa4gen_status fa4gen_set_varlen_schedule(const fa4gen_handle* h, int32_t on);

/* Give each sequence of a split varlen batch its own split count on the device (shares > 0;
 * the default, 4, on decode batches of per-sequence key lengths): the grid holds `shares` waves
 * of CTA slots' worth of (sequence, split) units, one per sequence and the rest dealt by the
 * sequences' K blocks, at most the call's count each. 0: FA4's one count for every sequence.
 * Same results up to the combine's rounding; other values are for measuring. A negative count
 * is FA4GEN_ERR_INVALID_ARGUMENT. */
fa4gen_status fa4gen_set_sequence_splits(const fa4gen_handle* h, int32_t shares);

/* Which kernel reduces split-KV partials (splitting forwards and fa4gen_combine): 0 by shape
 * (the default: a group of lanes per row where its round trips over the splits are no more
 * than a CTA per row's waves), 1 one CTA per (query, head) row, 2 a group of lanes per row.
 * Both compute the same fp32 reduction (summed in another order); for measuring and testing. */
fa4gen_status fa4gen_set_combine_kernel(const fa4gen_handle* h, int32_t kernel);

/* FA4GEN_OK if fa4gen_forward would run this problem (validation, selection, kernel present). */
fa4gen_status fa4gen_supports(const fa4gen_handle* h, const fa4gen_problem* p);

/* The stem of the kernel selected for p, written into buf (NUL-terminated, truncated to len). */
fa4gen_status fa4gen_kernel_name(const fa4gen_handle* h, const fa4gen_problem* p, char* buf, uint64_t len);

/* Run attention on `stream` (a CUstream / cudaStream_t; NULL = legacy default stream).
 * q, k, v, out: device pointers, 16-byte aligned; lse: fp32 device pointer when return_lse. */
fa4gen_status fa4gen_forward(fa4gen_handle* h, const fa4gen_problem* p, const void* q, const void* k,
                             const void* v, void* out, float* lse, void* stream);

/* fa4gen_forward with the serving features' arrays (extra may be NULL when none is declared)
 * and an optional split-KV workspace (NULL: the handle's own, grown on first use per stream;
 * growing during CUDA graph capture is refused, so run a shape once before capturing it). */
fa4gen_status fa4gen_forward_ext(fa4gen_handle* h, const fa4gen_problem* p, const void* q, const void* k,
                                 const void* v, void* out, float* lse, const fa4gen_seq_ptrs* extra,
                                 void* workspace, uint64_t workspace_bytes, void* stream);

/* FA4's flash_attn_combine: reduce num_splits (1..256) fp32 partial outputs and LSEs into out
 * (p's dtype, FA4GEN_FP32 included, and o_strides) and, with p->return_lse, lse (p's LSE layout):
 *   lse = log(sum_s exp(lse_s) [+ exp(sink)]),  out = sum_s exp(lse_s - lse) * o_s.
 * o_partial: fp32 (num_splits, B, Sq, H, Dv), or (num_splits, total_q, H, Dv) when total_q >= 0;
 * lse_partial: fp32 (num_splits, B, H, Sq), or (num_splits, H, total_q); both contiguous and
 * 16-byte aligned (the layout split-KV forwards write). p describes the rows: dtype, batch,
 * seqlen_q, heads, head_dim_v, o_strides, return_lse, total_q / has_seqused_q with extra's
 * cu_seqlens_q / seqused_q, has_sinks with extra's sinks. Its K side must be valid but is not
 * read, nor its head_dim (fa4gen_problem_init(p, dtype, B, Sq, Sq, H, H, Dv, Dv) serves). Dv is
 * a multiple of 8 up to 256, or of 16 up to 512 (MLA decode's): rows past 256 columns are
 * reduced as two halves, a launch each (512: two of 256). The kernel comes from the canonical
 * combine module of (dtype, part width, LSE, sink, ragged rows), which model plans ship
 * (FA4GEN_FP32: the bf16 module's, else the fp16 one's, each able to write fp32);
 * a split that saw no key (lse_s = -inf) contributes nothing, and a row none saw gives 0 and
 * -inf. */
fa4gen_status fa4gen_combine(const fa4gen_handle* h, const fa4gen_problem* p, uint32_t num_splits,
                             const float* o_partial, const float* lse_partial, void* out, float* lse,
                             const fa4gen_seq_ptrs* extra, void* stream);

/* Bytes of workspace fa4gen_forward_ext needs for p: split-KV's partials, or the sm90 flagship's
 * split tail (counters and tile parts; long unmasked calls, see Problem::split_tail); then, for a
 * varlen batch of more than one sequence on sm90, the list of its tiles (8 bytes per sequence and
 * Q block of the longest, see fa4gen_set_varlen_schedule); 0 when none applies. Without a
 * workspace passed, the handle's own serves; during graph capture a split-tail or varlen call
 * that finds none runs unsplit or on the padded schedule instead of failing. */
fa4gen_status fa4gen_workspace_bytes(const fa4gen_handle* h, const fa4gen_problem* p, uint64_t* out);

#ifdef __cplusplus
}
#endif
#endif /* FA4GEN_H */
