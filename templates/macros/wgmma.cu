{#- askama macros rendering the per-shape wgmma instructions a kernel uses (sm_90a).
    `n` is the instruction's N (a multiple of 8, at most 256), `ty` the PTX element type
    (bf16 or f16). Accumulators are fp32, laid out as described in fa4gen/wgmma.cuh. -#}
{% macro ss(n, ty) %}
// D[64x{{ n }}] (+)= A[64x16] * B[16x{{ n }}]; A and B in shared memory, both K-major (descriptors).
FA4_DEVICE void wgmma_m64n{{ n }}k16_ss(float (&d)[{{ n / 8 }}][4], u64 a_desc, u64 b_desc, int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %{{ n / 2 + 2 }}, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ ty }}.{{ ty }} {"
      "{% for i in 0..n / 2 %}%{{ i }}{% if i + 1 < n / 2 %},{% endif %}{% endfor %}"
      "}, %{{ n / 2 }}, %{{ n / 2 + 1 }}, p, 1, 1, 0, 0;\n\t}"
      : {% for i in 0..n / 2 %}"+f"(d[{{ i / 4 }}][{{ i % 4 }}]){% if i + 1 < n / 2 %}, {% endif %}{% endfor %}
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}
{% endmacro %}
{% macro rs(n, ty) %}
// D[64x{{ n }}] += A[64x16] * B[16x{{ n }}]; A from registers (the m16k16 fragment of each warp's 16
// rows), B in shared memory N-major (transposed: V as stored, keys x dims).
FA4_DEVICE void wgmma_m64n{{ n }}k16_rs(float (&d)[{{ n / 8 }}][4], const u32 (&a)[4], u64 b_desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, 1, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ ty }}.{{ ty }} {"
      "{% for i in 0..n / 2 %}%{{ i }}{% if i + 1 < n / 2 %},{% endif %}{% endfor %}"
      "}, {{ "{" }}%{{ n / 2 }},%{{ n / 2 + 1 }},%{{ n / 2 + 2 }},%{{ n / 2 + 3 }}}, %{{ n / 2 + 4 }}, p, 1, 1, 1;\n\t}"
      : {% for i in 0..n / 2 %}"+f"(d[{{ i / 4 }}][{{ i % 4 }}]){% if i + 1 < n / 2 %}, {% endif %}{% endfor %}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

// The same, with D = A * B where `accumulate` is 0 (a window tile's first P V). A function of its
// own: the run-time flag, even where it was always 1, changed the code ptxas made of every kernel.
FA4_DEVICE void wgmma_m64n{{ n }}k16_rs_acc(float (&d)[{{ n / 8 }}][4], const u32 (&a)[4], u64 b_desc, int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %{{ n / 2 + 5 }}, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n{{ n }}k16.f32.{{ ty }}.{{ ty }} {"
      "{% for i in 0..n / 2 %}%{{ i }}{% if i + 1 < n / 2 %},{% endif %}{% endfor %}"
      "}, {{ "{" }}%{{ n / 2 }},%{{ n / 2 + 1 }},%{{ n / 2 + 2 }},%{{ n / 2 + 3 }}}, %{{ n / 2 + 4 }}, p, 1, 1, 1;\n\t}"
      : {% for i in 0..n / 2 %}"+f"(d[{{ i / 4 }}][{{ i % 4 }}]){% if i + 1 < n / 2 %}, {% endif %}{% endfor %}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}
{% endmacro %}
