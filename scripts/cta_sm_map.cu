// Which SM each CTA of a persistent-shaped launch lands on (one CTA per SM: 384 threads,
// 225 KB of shared memory), alone and in clusters of 2: whether consecutive CTA indices, which
// the flagship's snake gives consecutive tiles (one head's Q blocks), run on neighbouring SMs.
//   nvcc -arch=sm_90a -o /tmp/cta_sm_map scripts/cta_sm_map.cu && /tmp/cta_sm_map
#include <cstdio>
#include <cuda_runtime.h>

__global__ void where(int *sm) {
  extern __shared__ int smem[];
  smem[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    sm[blockIdx.x] = id + smem[0];
  }
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int smem = 225 * 1024;
  cudaFuncSetAttribute(where, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int *d, h[256];
  cudaMalloc(&d, sizeof h);
  for (int cluster : {1, 2}) {
    for (int rep = 0; rep < 2; ++rep) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(sms);
      cfg.blockDim = dim3(384);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = cluster;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      cudaError_t e = cudaLaunchKernelEx(&cfg, where, d);
      cudaMemcpy(h, d, sms * sizeof(int), cudaMemcpyDeviceToHost);
      printf("cluster %d, launch %d (%s): CTA -> SM", cluster, rep, cudaGetErrorString(e));
      for (int i = 0; i < sms; ++i) printf("%s%d", i % 22 ? " " : "\n  ", h[i]);
      printf("\n");
    }
  }
  return 0;
}
