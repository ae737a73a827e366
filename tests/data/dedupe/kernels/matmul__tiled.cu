// Tiled matrix multiply through shared memory.
#define TILE 32

__global__ void sgemm_tiled(const float* __restrict__ a, const float* __restrict__ b,
                            float* __restrict__ c, int m, int n, int k) {
    __shared__ float ta[TILE][TILE];
    __shared__ float tb[TILE][TILE + 1];  // padded against bank conflicts
    int ty = threadIdx.y, tx = threadIdx.x;
    int r = blockIdx.y * TILE + ty;
    int q = blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int t = 0; t < (k + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + tx;
        int kb = t * TILE + ty;
        ta[ty][tx] = (r < m && ka < k) ? a[r * k + ka] : 0.f;
        tb[ty][tx] = (kb < k && q < n) ? b[kb * n + q] : 0.f;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TILE; ++i) acc += ta[ty][i] * tb[i][tx];
        __syncthreads();
    }
    if (r < m && q < n) c[r * n + q] = acc;
}
