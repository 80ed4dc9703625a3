/* fa4gen C ABI: ahead-of-time FlashAttention kernels, selected and launched on raw device
 * pointers. Link against libfa4gen.so (cargo build --release). Thread-safe: one handle may be
 * used from several threads; errors are reported per thread.
 *
 * Conventions (FA4's): q (B, Sq, H, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv), out (B, Sq, H, Dv),
 * lse (B, H, Sq) fp32 natural log. Strides are in elements, as {batch, row, head}; the last dim
 * must be contiguous and every stride a multiple of 8 (16-byte rows). Causal and windows are
 * bottom-right aligned; rows that see no key give 0 and LSE -inf.
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

#define FA4GEN_ABI_VERSION 1u

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

typedef enum fa4gen_dtype { FA4GEN_BF16 = 0, FA4GEN_FP16 = 1 } fa4gen_dtype;

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
  int32_t num_splits;                  /* 1, or < 1 for the heuristic (split-KV not built yet: runs unsplit) */
} fa4gen_problem;

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

/* FA4GEN_OK if fa4gen_forward would run this problem (validation, selection, kernel present). */
fa4gen_status fa4gen_supports(const fa4gen_handle* h, const fa4gen_problem* p);

/* The stem of the kernel selected for p, written into buf (NUL-terminated, truncated to len). */
fa4gen_status fa4gen_kernel_name(const fa4gen_handle* h, const fa4gen_problem* p, char* buf, uint64_t len);

/* Run attention on `stream` (a CUstream / cudaStream_t; NULL = legacy default stream).
 * q, k, v, out: device pointers, 16-byte aligned; lse: fp32 device pointer when return_lse. */
fa4gen_status fa4gen_forward(fa4gen_handle* h, const fa4gen_problem* p, const void* q, const void* k,
                             const void* v, void* out, float* lse, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* FA4GEN_H */
