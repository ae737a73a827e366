// Matrix transpose, naive: reads coalesced, writes strided.
__global__ void transpose_naive(const float* src, float* dst, int height, int width) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        dst[x * height + y] = src[y * width + x];
    }
}

void transpose_naive_launch(const float* src, float* dst, int height, int width) {
    dim3 threads(32, 8);
    dim3 blocks((width + 31) / 32, (height + 7) / 8);
    transpose_naive<<<blocks, threads>>>(src, dst, height, width);
}
