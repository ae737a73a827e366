// Vectorised addition: four floats per load through float4.
#include <cuda_runtime.h>

__global__ void add_vec4_kernel(const float4* __restrict__ a4, const float4* __restrict__ b4,
                                float4* __restrict__ c4, const float* a, const float* b, float* c,
                                int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    int n4 = n / 4;
    if (tid < n4) {
        float4 va = a4[tid];
        float4 vb = b4[tid];
        float4 vc;
        vc.x = va.x + vb.x;
        vc.y = va.y + vb.y;
        vc.z = va.z + vb.z;
        vc.w = va.w + vb.w;
        c4[tid] = vc;
    }
    // the tail that does not fill a float4
    int tail = n4 * 4 + tid;
    if (tid < 4 && tail < n) {
        c[tail] = a[tail] + b[tail];
    }
}
