// Sum reduction with warp shuffles; one shared slot per warp.
__inline__ __device__ float warp_reduce(float val) {
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        val += __shfl_xor_sync(0xffffffff, val, offset);
    return val;
}

__global__ void reduce_sum_shfl(const float* __restrict__ x, float* __restrict__ y, int len) {
    static __shared__ float warp_sums[32];
    int lane = threadIdx.x % warpSize;
    int wid = threadIdx.x / warpSize;
    float v = 0.0f;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < len; k += blockDim.x * gridDim.x)
        v += x[k];
    v = warp_reduce(v);
    if (lane == 0) warp_sums[wid] = v;
    __syncthreads();
    v = (threadIdx.x < blockDim.x / warpSize) ? warp_sums[lane] : 0.0f;
    if (wid == 0) {
        v = warp_reduce(v);
        if (lane == 0) y[blockIdx.x] = v;
    }
}
