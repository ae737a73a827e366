// GELU with the tanh approximation, half precision in and out.
#include <cuda_fp16.h>

__device__ __forceinline__ float gelu_tanh(float x) {
    const float k0 = 0.7978845608f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    float inner = k0 * (x + k1 * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

__global__ void gelu_half_kernel(const half2* __restrict__ src, half2* __restrict__ dst, int pairs) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    float2 f = __half22float2(src[p]);
    f.x = gelu_tanh(f.x);
    f.y = gelu_tanh(f.y);
    dst[p] = __float22half2_rn(f);
}
