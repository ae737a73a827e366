// Known-good row-wise kernels: one block per row, dynamic shared memory of 2 * blockDim.x floats.
__device__ float block_reduce(float v, float* buf, bool is_max) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] = is_max ? fmaxf(buf[threadIdx.x], buf[threadIdx.x + s])
                                                   : buf[threadIdx.x] + buf[threadIdx.x + s];
    __syncthreads();
  }
  float r = buf[0];
  __syncthreads();
  return r;
}
__global__ void softmax_kernel(float* y, const float* x, int rows, int cols) {
  extern __shared__ float buf[];
  const float* xr = x + (long long)blockIdx.x * cols;
  float m = -INFINITY, s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
  m = block_reduce(m, buf, true);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += expf(xr[j] - m);
  s = block_reduce(s, buf, false);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) y[(long long)blockIdx.x * cols + j] = expf(xr[j] - m) / s;
}
__global__ void log_softmax_kernel(float* y, const float* x, int rows, int cols) {
  extern __shared__ float buf[];
  const float* xr = x + (long long)blockIdx.x * cols;
  float m = -INFINITY, s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
  m = block_reduce(m, buf, true);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += expf(xr[j] - m);
  s = block_reduce(s, buf, false);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) y[(long long)blockIdx.x * cols + j] = xr[j] - m - logf(s);
}
__global__ void row_sum_kernel(float* y, const float* x, int rows, int cols) {
  extern __shared__ float buf[];
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += x[(long long)blockIdx.x * cols + j];
  s = block_reduce(s, buf, false);
  if (threadIdx.x == 0) y[blockIdx.x] = s;
}
