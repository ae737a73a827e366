// Sum reduction: shared-memory tree inside each block, one partial per block.
template <int BLOCK>
__global__ void reduce_sum_tree(const float* __restrict__ in, float* __restrict__ partial, int n) {
    __shared__ float cache[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK * 2 + tid;
    float acc = 0.0f;
    if (i < n) acc += in[i];
    if (i + BLOCK < n) acc += in[i + BLOCK];
    cache[tid] = acc;
    __syncthreads();
    // halve the active threads each step
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) {
            cache[tid] += cache[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = cache[0];
}
