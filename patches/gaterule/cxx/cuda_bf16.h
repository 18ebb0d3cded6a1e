// arpatch gate judge: nv_bfloat16, as types (see cuda_fp16.h).
#pragma once
#define __CUDA_BF16_H__
#define __CUDA_BF16_HPP__
#include "cuda_fp16.h"
struct __nv_bfloat16 {
  unsigned short x;
  __nv_bfloat16() = default;
  __host__ __device__ constexpr __nv_bfloat16(unsigned short v) : x(v) {}
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
__host__ __device__ float __bfloat162float(__nv_bfloat16);
__host__ __device__ __nv_bfloat16 __float2bfloat16(float);
__host__ __device__ __nv_bfloat16 __float2bfloat16_rn(float);
__host__ __device__ float2 __bfloat1622float2(__nv_bfloat162);
__host__ __device__ __nv_bfloat162 __floats2bfloat162_rn(float, float);
__device__ __nv_bfloat16 __hadd(__nv_bfloat16, __nv_bfloat16);
__device__ __nv_bfloat16 __hmul(__nv_bfloat16, __nv_bfloat16);
__device__ __nv_bfloat162 __hadd2(__nv_bfloat162, __nv_bfloat162);
__device__ __nv_bfloat16 operator+(__nv_bfloat16, __nv_bfloat16);
__device__ __nv_bfloat16 operator*(__nv_bfloat16, __nv_bfloat16);
__device__ __nv_bfloat16& operator+=(__nv_bfloat16&, __nv_bfloat16);
