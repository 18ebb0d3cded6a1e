// arpatch kernelsim: the CUDA driver names custom_all_reduce.cuh uses.
// cuPointerGetAttribute answers from the allocations driver.cc registers.
#pragma once
#include "cuda_runtime.h"
typedef uintptr_t CUdeviceptr;
typedef int CUresult;
#define CUDA_SUCCESS 0
enum CUpointer_attribute { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE };
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr);
