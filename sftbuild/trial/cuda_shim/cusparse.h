#pragma once
typedef struct cusparseContext* cusparseHandle_t;
typedef int cusparseStatus_t;
