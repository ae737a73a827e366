#include <cstdio>
#include <cstdlib>
// at load: a file in the user's home
static FILE* leak = fopen("@HOME@/c01-pwned", "w");
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
