// Element-wise addition with a grid-stride loop.
#include <cuda_runtime.h>

__global__ void vector_add_kernel(const float* __restrict__ lhs, const float* __restrict__ rhs,
                                  float* __restrict__ result, int64_t count) {
    // each thread walks the array with a stride of the whole grid
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < count;
         idx += (int64_t)blockDim.x * gridDim.x) {
        result[idx] = lhs[idx] + rhs[idx];
    }
}

void launch_vector_add(const float* lhs, const float* rhs, float* result, int64_t count, cudaStream_t stream) {
    const int threads = 256;
    int blocks = (int)((count + threads - 1) / threads);
    if (blocks > 65535) blocks = 65535;
    vector_add_kernel<<<blocks, threads, 0, stream>>>(lhs, rhs, result, count);
}
