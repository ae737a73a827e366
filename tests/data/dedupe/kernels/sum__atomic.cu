// Sum reduction: every thread accumulates a strided slice and adds it atomically.
__global__ void sum_atomic(const double* data, double* total, long n) {
    double local = 0.0;
    long stride = (long)gridDim.x * blockDim.x;
    for (long j = (long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
        local += data[j];
    }
    if (local != 0.0) {
        atomicAdd(total, local);
    }
}

void sum_launch(const double* data, double* total, long n) {
    cudaMemset(total, 0, sizeof(double));
    sum_atomic<<<120, 256>>>(data, total, n);
}
