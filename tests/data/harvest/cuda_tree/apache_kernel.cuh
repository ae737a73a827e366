// SPDX-License-Identifier: Apache-2.0
#pragma once

__global__ void scale_kernel(float* y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] *= s;
  }
}
