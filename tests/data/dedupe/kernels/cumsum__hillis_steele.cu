// Inclusive prefix sum of one block, Hillis-Steele with double buffering.
__global__ void scan_block(const int* in, int* out, int n) {
    extern __shared__ int temp[];
    int t = threadIdx.x;
    int pout = 0, pin = 1;
    temp[pout * n + t] = (t < n) ? in[t] : 0;
    __syncthreads();
    for (int offset = 1; offset < n; offset *= 2) {
        pout = 1 - pout;
        pin = 1 - pout;
        if (t >= offset)
            temp[pout * n + t] = temp[pin * n + t] + temp[pin * n + t - offset];
        else
            temp[pout * n + t] = temp[pin * n + t];
        __syncthreads();
    }
    if (t < n) out[t] = temp[pout * n + t];
}
