// How many clusters of 2, 4 and 8 CTAs the GPU runs at once for a kernel shaped like the
// flagship (one CTA per SM: 384 threads, ~225 KB of shared memory): the SMs a cluster size
// leaves idle (clusters do not cross a GPC). Build and run on the GPU host:
//   nvcc -arch=sm_90a -o /tmp/cluster_occupancy scripts/cluster_occupancy.cu && /tmp/cluster_occupancy
#include <cstdio>
#include <cuda_runtime.h>

__global__ void shaped(int *out) {
  extern __shared__ int smem[];
  smem[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (threadIdx.x == 0 && out) out[blockIdx.x] = smem[5];
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int smem = 225 * 1024;
  cudaFuncSetAttribute(shaped, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(shaped, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int threads : {384, 512}) {
    for (int size : {1, 2, 4, 8}) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(size * 64);
      cfg.blockDim = dim3(threads);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = size;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, shaped, &cfg);
      printf("threads %d cluster %d: %d clusters at once = %d of %d SMs busy (%s)\n", threads, size,
             clusters, clusters * size, sms, cudaGetErrorString(e));
    }
  }
  return 0;
}
