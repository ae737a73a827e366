#pragma once
typedef int cusolverStatus_t;
