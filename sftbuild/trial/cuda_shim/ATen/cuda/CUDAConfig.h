#pragma once
// Build-time configuration that the CUDA build of torch generates.
#define AT_CUDNN_ENABLED() 0
#define AT_CUSPARSELT_ENABLED() 0
#define AT_HIPSPARSELT_ENABLED() 0
#define AT_ROCM_ENABLED() 0
#define AT_MAGMA_ENABLED() 0
#define NVCC_FLAGS_EXTRA ""
