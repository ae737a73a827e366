#pragma once
// Stand-in for cuRAND's device API <curand_kernel.h>, for toolkits installed without cuRAND: the
// state types and the generator functions kernels call, over a counter-based hash. It compiles what
// real cuRAND compiles; its numbers are not cuRAND's (the real header, where present, comes first).
#include <cuda_runtime.h>
#include <math.h>

struct sftbuild_curand_state { unsigned long long seed, subsequence, offset; float spare; int has_spare; };
typedef sftbuild_curand_state curandStatePhilox4_32_10_t;
typedef sftbuild_curand_state curandStateXORWOW_t;
typedef sftbuild_curand_state curandStateMRG32k3a_t;
typedef sftbuild_curand_state curandState_t;
typedef sftbuild_curand_state curandState;

__host__ __device__ inline unsigned int sftbuild_curand_mix(unsigned long long x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return (unsigned int)x;
}
__device__ inline void curand_init(unsigned long long seed, unsigned long long subsequence,
                                   unsigned long long offset, sftbuild_curand_state* state) {
  state->seed = seed; state->subsequence = subsequence; state->offset = offset; state->has_spare = 0;
}
__device__ inline unsigned int curand(sftbuild_curand_state* state) {
  return sftbuild_curand_mix(state->seed * 0x9e3779b97f4a7c15ULL ^ (state->subsequence << 32) ^ state->offset++);
}
__device__ inline uint4 curand4(sftbuild_curand_state* state) {
  uint4 r; r.x = curand(state); r.y = curand(state); r.z = curand(state); r.w = curand(state); return r;
}
__device__ inline float curand_uniform(sftbuild_curand_state* state) {  // (0, 1]
  return (curand(state) + 1.0f) * 2.3283064e-10f;
}
__device__ inline double curand_uniform_double(sftbuild_curand_state* state) {
  return (curand(state) + 1.0) * 2.3283064365386963e-10;
}
__device__ inline float4 curand_uniform4(sftbuild_curand_state* state) {
  float4 r; r.x = curand_uniform(state); r.y = curand_uniform(state); r.z = curand_uniform(state);
  r.w = curand_uniform(state); return r;
}
__device__ inline float curand_normal(sftbuild_curand_state* state) {  // Box-Muller
  float u = curand_uniform(state), v = curand_uniform(state);
  return sqrtf(-2.0f * logf(u)) * cospif(2.0f * v);
}
__device__ inline double curand_normal_double(sftbuild_curand_state* state) {
  double u = curand_uniform_double(state), v = curand_uniform_double(state);
  return sqrt(-2.0 * log(u)) * cospi(2.0 * v);
}
__device__ inline float2 curand_normal2(sftbuild_curand_state* state) {
  float2 r; r.x = curand_normal(state); r.y = curand_normal(state); return r;
}
__device__ inline float4 curand_normal4(sftbuild_curand_state* state) {
  float4 r; r.x = curand_normal(state); r.y = curand_normal(state); r.z = curand_normal(state);
  r.w = curand_normal(state); return r;
}
__device__ inline void skipahead(unsigned long long n, sftbuild_curand_state* state) { state->offset += n; }
__device__ inline void skipahead_sequence(unsigned long long n, sftbuild_curand_state* state) {
  state->subsequence += n;
}
