// Test data of our own: RMS norm over the last dimension, one block per row, and its raw launcher.
#include "norm.h"

template <typename T>
__global__ void rms_norm_kernel(T* out, const T* x, const T* w, float eps, int cols) {
  __shared__ float partial[256];
  const int row = blockIdx.x;
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = (float)x[row * cols + c];
    acc += v * v;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float r = rsqrtf(partial[0] / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[row * cols + c] = (T)((float)x[row * cols + c] * r * (float)w[c]);
}

template <typename T>
void launch_rms_norm(T* out, const T* x, const T* w, float eps, int rows, int cols, cudaStream_t stream) {
  rms_norm_kernel<T><<<rows, 256, 0, stream>>>(out, x, w, eps, cols);
}

template void launch_rms_norm<float>(float*, const float*, const float*, float, int, int, cudaStream_t);
template void launch_rms_norm<__half>(__half*, const __half*, const __half*, float, int, int, cudaStream_t);
