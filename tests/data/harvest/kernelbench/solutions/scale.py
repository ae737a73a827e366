import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
__global__ void scale_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
torch::Tensor scale(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int n = x.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.mod = load_inline("scale", cpp_sources="torch::Tensor scale(torch::Tensor x);",
                               cuda_sources=cuda_src, functions=["scale"])

    def forward(self, x):
        return self.mod.scale(x)
