// arpatch gate judge: half, as types; its arithmetic is device code, which
// the host pass parses and never builds.
#pragma once
#include "cuda_runtime.h"
struct __half {
  unsigned short x;
};
struct __half2 {
  __half x, y;
};
typedef __half half;
typedef __half2 half2;
__host__ __device__ float __half2float(__half);
__host__ __device__ __half __float2half(float);
__host__ __device__ __half __float2half_rn(float);
__host__ __device__ __half2 __floats2half2_rn(float, float);
__host__ __device__ float2 __half22float2(__half2);
__device__ __half __hadd(__half, __half);
__device__ __half __hmul(__half, __half);
__device__ __half2 __hadd2(__half2, __half2);
__device__ __half operator+(__half, __half);
__device__ __half operator*(__half, __half);
__device__ __half& operator+=(__half&, __half);
