// LayerNorm forward with Welford statistics per row, one warp per row.
__device__ void welford_merge(float& mean, float& m2, float& count, float b_mean, float b_m2, float b_count) {
    float total = count + b_count;
    if (total == 0.f) return;
    float delta = b_mean - mean;
    mean += delta * b_count / total;
    m2 += b_m2 + delta * delta * count * b_count / total;
    count = total;
}

__global__ void layernorm_warp(const float* x, const float* gamma, const float* beta, float* y,
                               int rows, int hidden, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* xr = x + (long)row * hidden;
    float mean = 0.f, m2 = 0.f, count = 0.f;
    for (int j = lane; j < hidden; j += 32) {
        count += 1.f;
        float d = xr[j] - mean;
        mean += d / count;
        m2 += d * (xr[j] - mean);
    }
    for (int off = 16; off > 0; off >>= 1) {
        float om = __shfl_down_sync(0xffffffff, mean, off);
        float o2 = __shfl_down_sync(0xffffffff, m2, off);
        float oc = __shfl_down_sync(0xffffffff, count, off);
        welford_merge(mean, m2, count, om, o2, oc);
    }
    mean = __shfl_sync(0xffffffff, mean, 0);
    m2 = __shfl_sync(0xffffffff, m2, 0);
    float rstd = rsqrtf(m2 / hidden + eps);
    for (int j = lane; j < hidden; j += 32)
        y[(long)row * hidden + j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
}
