/* The C ABI from C: open, query, run forward on device buffers and check the result against a
 * double-precision reference, then bad inputs, each refused with its status and a message.
 * Build and run on a GPU host (scripts/gpu-check.sh capi):
 *   nvcc -o capi_test tests/capi/capi_test.c -Iinclude -L<dir of libfa4gen.so> -lfa4gen
 *   LD_LIBRARY_PATH=<that dir> ./capi_test <kernels root> */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa4gen.h"

static int failures = 0;
#define CHECK(cond, ...)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      failures++;                                                                  \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                  \
      printf(__VA_ARGS__);                                                         \
      printf(" (last error: %s)\n", fa4gen_last_error());                         \
    }                                                                              \
  } while (0)

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: capi_test <kernels root>\n");
    return 2;
  }
  CHECK(fa4gen_abi_version() == FA4GEN_ABI_VERSION, "abi version");
  fa4gen_handle* h = NULL;
  CHECK(fa4gen_open("/nonexistent", 0, &h) == FA4GEN_ERR_LIBRARY, "missing kernel dir");
  CHECK(strlen(fa4gen_last_error()) > 0, "message for missing dir");
  fa4gen_status st = fa4gen_open(argv[1], 0, &h);
  if (st != FA4GEN_OK) {
    printf("FAIL open: %d %s\n", st, fa4gen_last_error());
    return 1;
  }

  /* B=2, Sq=37, Sk=300, H=4, Hkv=2, d=64, causal, LSE. */
  const int B = 2, SQ = 37, SK = 300, H = 4, HKV = 2, D = 64;
  fa4gen_problem p;
  fa4gen_problem_init(&p, FA4GEN_BF16, B, SQ, SK, H, HKV, D, D);
  p.causal = 1;
  p.return_lse = 1;
  CHECK(fa4gen_supports(h, &p) == FA4GEN_OK, "supports");
  char name[256];
  CHECK(fa4gen_kernel_name(h, &p, name, sizeof name) == FA4GEN_OK, "kernel name");
  printf("kernel: %s\n", name);

  size_t nq = (size_t)B * SQ * H * D, nk = (size_t)B * SK * HKV * D;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4);
  uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2), *ho = malloc(nq * 2);
  float* hl = malloc((size_t)B * H * SQ * 4);
  srand(7);
  for (size_t i = 0; i < nq; i++) { hq[i] = to_bf16((float)rand() / RAND_MAX * 2 - 1); q[i] = from_bf16(hq[i]); }
  for (size_t i = 0; i < nk; i++) { hk[i] = to_bf16((float)rand() / RAND_MAX * 2 - 1); k[i] = from_bf16(hk[i]); }
  for (size_t i = 0; i < nk; i++) { hv[i] = to_bf16((float)rand() / RAND_MAX * 2 - 1); v[i] = from_bf16(hv[i]); }
  void *dq, *dk, *dv, *dout;
  float* dlse;
  cudaMalloc(&dq, nq * 2); cudaMalloc(&dk, nk * 2); cudaMalloc(&dv, nk * 2); cudaMalloc(&dout, nq * 2);
  cudaMalloc((void**)&dlse, (size_t)B * H * SQ * 4);
  cudaMemcpy(dq, hq, nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, hk, nk * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, hv, nk * 2, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, nq * 2); /* poison: NaN */
  cudaMemset(dlse, 0xff, (size_t)B * H * SQ * 4);
  cudaStream_t s;
  cudaStreamCreate(&s);
  CHECK(fa4gen_forward(h, &p, dq, dk, dv, dout, dlse, s) == FA4GEN_OK, "forward");
  cudaStreamSynchronize(s);
  cudaMemcpy(ho, dout, nq * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(hl, dlse, (size_t)B * H * SQ * 4, cudaMemcpyDeviceToHost);
  double worst = 0, worst_lse = 0;
  double scale = 1.0 / sqrt((double)D);
  double* sc = malloc(SK * sizeof(double));
  for (int b = 0; b < B; b++)
    for (int hh = 0; hh < H; hh++)
      for (int i = 0; i < SQ; i++) {
        int hk_ = hh / (H / HKV);
        double m = -INFINITY;
        for (int j = 0; j < SK; j++) {
          sc[j] = -INFINITY;
          if (j <= i + SK - SQ) {
            double dot = 0;
            for (int c = 0; c < D; c++)
              dot += (double)q[(((size_t)b * SQ + i) * H + hh) * D + c] * k[(((size_t)b * SK + j) * HKV + hk_) * D + c];
            sc[j] = dot * scale;
            if (sc[j] > m) m = sc[j];
          }
        }
        double l = 0;
        for (int j = 0; j < SK; j++) l += sc[j] == -INFINITY ? 0 : exp(sc[j] - m);
        for (int c = 0; c < D; c++) {
          double o = 0;
          for (int j = 0; j < SK; j++)
            if (sc[j] != -INFINITY) o += exp(sc[j] - m) / l * v[(((size_t)b * SK + j) * HKV + hk_) * D + c];
          double got = from_bf16(ho[(((size_t)b * SQ + i) * H + hh) * D + c]);
          double e = isnan(got) ? INFINITY : fabs(got - o);
          if (e > worst) worst = e;
        }
        double lse = m + log(l), got = hl[((size_t)b * H + hh) * SQ + i];
        double e = fabs(got - lse) / (fabs(lse) > 1 ? fabs(lse) : 1);
        if (!(e <= worst_lse)) worst_lse = isnan(e) ? INFINITY : (e > worst_lse ? e : worst_lse);
      }
  printf("C ABI forward: max |out - ref| = %.3e, max LSE rel err = %.2e\n", worst, worst_lse);
  CHECK(worst < 1.6e-2, "output error %.3e", worst); /* bf16 of values |x| <= 1: ~2 ulp */
  CHECK(worst_lse < 1e-3, "lse error %.2e", worst_lse);

  /* Bad inputs: each refused with its status, before any launch. */
  fa4gen_problem bad = p;
  bad.dtype = 5;
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "dtype 5");
  CHECK(strstr(fa4gen_last_error(), "dtype") != NULL, "message names dtype");
  bad = p; bad.head_dim = 512; bad.head_dim_v = 512;
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "d 512");
  bad = p; bad.heads_kv = 3;
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "H %% Hkv");
  bad = p; bad.q_strides[1] = 7;
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "stride 7");
  bad = p; bad.num_splits = 300;
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "num_splits 300");
  bad = p; bad.has_sinks = 1; /* declared, but no array passed */
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "sinks without array");
  bad = p; bad.total_q = 5; bad.page_size = 16; bad.num_pages = 1; bad.pages_per_seq = 1; /* seqlen_k > 16 */
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "paged seqlen_k");
  CHECK(fa4gen_forward(h, &p, (char*)dq + 2, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "misaligned q");
  CHECK(fa4gen_forward(h, &p, dq, dk, dv, dout, NULL, s) == FA4GEN_ERR_INVALID_ARGUMENT, "null lse");
  CHECK(fa4gen_forward(h, NULL, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "null problem");
  CHECK(fa4gen_forward(NULL, &p, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "null handle");
  bad = p; bad.softmax_scale = NAN;
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "NaN scale");
  bad = p; bad.causal = 3;
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "causal 3");
  /* The standalone combine refuses the same way (dq stands in for any 16-byte aligned buffer). */
  CHECK(fa4gen_combine(h, &p, 2, NULL, (const float*)dq, dout, dlse, NULL, s) == FA4GEN_ERR_INVALID_ARGUMENT,
        "combine: null o_partial");
  CHECK(strstr(fa4gen_last_error(), "o_partial") != NULL, "message names o_partial");
  CHECK(fa4gen_combine(h, &p, 0, (const float*)dq, (const float*)dq, dout, dlse, NULL, s) == FA4GEN_ERR_INVALID_ARGUMENT,
        "combine: 0 splits");
  CHECK(fa4gen_combine(h, &p, 2, (const float*)dq, (const float*)dq, dout, NULL, NULL, s) == FA4GEN_ERR_INVALID_ARGUMENT,
        "combine: null lse with return_lse");
  CHECK(fa4gen_set_combine_kernel(h, 3) == FA4GEN_ERR_INVALID_ARGUMENT, "combine kernel 3");
  CHECK(strstr(fa4gen_last_error(), "kernel") != NULL, "message names the kernel");
  CHECK(fa4gen_set_combine_kernel(h, 0) == FA4GEN_OK, "combine kernel by shape");
  bad = p; bad.dtype = FA4GEN_FP32; /* a combine's output only */
  CHECK(fa4gen_forward(h, &bad, dq, dk, dv, dout, dlse, s) == FA4GEN_ERR_INVALID_ARGUMENT, "forward fp32");
  CHECK(strstr(fa4gen_last_error(), "fa4gen_combine") != NULL, "message says where fp32 goes");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "stream healthy after refusals");

  /* fa4gen_combine into fp32 (FA4GEN_FP32: FA4's flash_attn_combine default for fp32 partials):
   * 3 splits of random partials over the forward's rows, MLA decode's Dv 512 (two column parts
   * of 256), some splits empty (LSE -inf), output and LSE poisoned, against a double reduction.
   * Its module (bf16, Dv 256, LSE) is compiled at first use where the kernels root lacks it
   * (the staged library has the jit). */
  CHECK(fa4gen_enable_jit(h, NULL) == FA4GEN_OK, "enable jit");
  {
    enum { S = 3, CD = 512 }; /* constants: l[S] below */
    const size_t rows = (size_t)B * SQ * H;
    float *po = malloc(S * rows * CD * 4), *pl = malloc(S * rows * 4), *co = malloc(rows * CD * 4), *cl = malloc(rows * 4);
    for (size_t i = 0; i < S * rows * CD; i++) po[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (size_t i = 0; i < S * rows; i++) pl[i] = i % 7 == 3 ? -INFINITY : (float)rand() / RAND_MAX * 8 - 4;
    float *dpo, *dpl, *dco, *dcl;
    cudaMalloc((void**)&dpo, S * rows * CD * 4); cudaMalloc((void**)&dpl, S * rows * 4);
    cudaMalloc((void**)&dco, rows * CD * 4); cudaMalloc((void**)&dcl, rows * 4);
    cudaMemcpy(dpo, po, S * rows * CD * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dpl, pl, S * rows * 4, cudaMemcpyHostToDevice);
    cudaMemset(dco, 0xff, rows * CD * 4);
    cudaMemset(dcl, 0xff, rows * 4);
    fa4gen_problem c;
    fa4gen_problem_init(&c, FA4GEN_FP32, B, SQ, SQ, H, H, CD, CD);
    c.return_lse = 1;
    CHECK(fa4gen_combine(h, &c, S, dpo, dpl, dco, dcl, NULL, s) == FA4GEN_OK, "combine fp32");
    cudaStreamSynchronize(s);
    cudaMemcpy(co, dco, rows * CD * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(cl, dcl, rows * 4, cudaMemcpyDeviceToHost);
    double cw = 0, cwl = 0;
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < H; hh++)
        for (int i = 0; i < SQ; i++) {
          /* o_partial (S, B, SQ, H, CD), lse_partial (S, B, H, SQ); out (B, SQ, H, CD), lse (B, H, SQ). */
          double l[S], m = -INFINITY, sum = 0;
          for (int sp = 0; sp < S; sp++) {
            l[sp] = pl[(((size_t)sp * B + b) * H + hh) * SQ + i];
            if (l[sp] > m) m = l[sp];
          }
          for (int sp = 0; sp < S; sp++) sum += m == -INFINITY ? 0 : exp(l[sp] - m);
          double lse = m == -INFINITY ? -INFINITY : m + log(sum);
          double got_l = cl[((size_t)b * H + hh) * SQ + i];
          double el = lse == -INFINITY ? (got_l == -INFINITY ? 0 : INFINITY) : fabs(got_l - lse) / (fabs(lse) > 1 ? fabs(lse) : 1);
          if (!(el <= cwl)) cwl = isnan(el) ? INFINITY : el;
          for (int col = 0; col < CD; col++) {
            double o = 0;
            for (int sp = 0; sp < S; sp++)
              if (l[sp] != -INFINITY)
                o += exp(l[sp] - lse) * po[((((size_t)sp * B + b) * SQ + i) * H + hh) * CD + col];
            double got = co[(((size_t)b * SQ + i) * H + hh) * CD + col];
            double e = isnan(got) ? INFINITY : fabs(got - o);
            if (e > cw) cw = e;
          }
        }
    printf("C ABI combine (fp32 out, Dv %d, %d splits): max |out - ref| = %.3e, max LSE rel err = %.2e\n", CD, S, cw, cwl);
    CHECK(cw < 1e-5, "combine fp32 output error %.3e", cw); /* fp32 sums of |x| <= 1: a few ulp */
    CHECK(cwl < 1e-5, "combine lse error %.2e", cwl);
    cudaFree(dpo); cudaFree(dpl); cudaFree(dco); cudaFree(dcl);
    free(po); free(pl); free(co); free(cl);
  }

  fa4gen_close(h);
  printf("C ABI test: %s (%d failures)\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
