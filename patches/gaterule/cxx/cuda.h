// arpatch gate judge: the CUDA driver API names custom_all_reduce.cuh
// uses; judge.cu answers cuPointerGetAttribute from its allocations.
#pragma once
#define __cuda_cuda_h__
#include "cuda_runtime.h"
typedef unsigned long long CUdeviceptr;
#ifndef CUDA_VERSION
#define CUDA_VERSION 12080
#endif
// An enum, as CUDA's own (cuda.h: enum cudaError_enum).
typedef enum cudaError_enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 } CUresult;
typedef int CUdevice;
enum CUpointer_attribute {
  CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
  CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
  CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
};
extern "C" CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr);
extern "C" CUresult cuGetErrorString(CUresult, const char**);
