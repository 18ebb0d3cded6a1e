// arpatch gate judge: the CUDA driver API names custom_all_reduce.cuh
// uses; judge.cu answers cuPointerGetAttribute from its allocations.
#pragma once
#include "cuda_runtime.h"
typedef unsigned long long CUdeviceptr;
typedef int CUresult;
typedef int CUdevice;
#define CUDA_SUCCESS 0
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
