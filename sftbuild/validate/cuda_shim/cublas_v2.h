#pragma once
#include <library_types.h>
typedef struct cublasContext* cublasHandle_t;
typedef int cublasStatus_t;
