// Test data of our own: a header the binding file includes whose host code no function of it calls.
#pragma once
inline int blas_only(int n) { return this_does_not_compile(n); }
