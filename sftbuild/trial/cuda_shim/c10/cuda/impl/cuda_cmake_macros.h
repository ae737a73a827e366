#pragma once
// Build-time configuration that the CUDA build of torch generates.
#define C10_CUDA_BUILD_SHARED_LIBS
