// Row softmax: one block per row, shared-memory max and sum.
__global__ void softmax_rows(const float* __restrict__ logits, float* __restrict__ probs, int cols) {
    extern __shared__ float buf[];
    const float* in_row = logits + (size_t)blockIdx.x * cols;
    float* out_row = probs + (size_t)blockIdx.x * cols;
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) mx = fmaxf(mx, in_row[c]);
    buf[threadIdx.x] = mx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }
    mx = buf[0];
    __syncthreads();
    float total = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) total += __expf(in_row[c] - mx);
    buf[threadIdx.x] = total;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.f / buf[0];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out_row[c] = __expf(in_row[c] - mx) * inv;
}
