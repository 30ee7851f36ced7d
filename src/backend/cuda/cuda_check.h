// Error checking for every CUDA runtime and cuBLAS(Lt) call: a failure throws ds::CheckError
// naming the call, the file:line and the library's error string (never a silent abort).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "common/check.h"

namespace ds::cuda {
const char* CublasStatusName(cublasStatus_t s);
}  // namespace ds::cuda

#define DS_CUDA_CHECK(expr)                                                             \
  do {                                                                                  \
    cudaError_t ds_cuda_err_ = (expr);                                                  \
    DS_CHECK(ds_cuda_err_ == cudaSuccess)                                               \
        << #expr << " -> " << cudaGetErrorName(ds_cuda_err_) << ": "                    \
        << cudaGetErrorString(ds_cuda_err_);                                            \
  } while (0)

// After a kernel launch: reports launch-configuration errors (and, asynchronously, earlier
// faults). Does not synchronise.
#define DS_CUDA_CHECK_LAUNCH(name)                                                      \
  do {                                                                                  \
    cudaError_t ds_cuda_err_ = cudaGetLastError();                                      \
    DS_CHECK(ds_cuda_err_ == cudaSuccess)                                               \
        << "launching " << (name) << " -> " << cudaGetErrorName(ds_cuda_err_) << ": "   \
        << cudaGetErrorString(ds_cuda_err_);                                            \
  } while (0)

#define DS_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                  \
    cublasStatus_t ds_cublas_st_ = (expr);                                              \
    DS_CHECK(ds_cublas_st_ == CUBLAS_STATUS_SUCCESS)                                    \
        << #expr << " -> " << ::ds::cuda::CublasStatusName(ds_cublas_st_);              \
  } while (0)
