// arpatch kernelsim: nv_bfloat16 as a float that rounds to bfloat16's
// precision (8 significant bits) on every conversion.
#pragma once
#include "cuda_fp16.h"
struct nv_bfloat16 {
  float f;
};
inline float __bfloat162float(nv_bfloat16 h) { return h.f; }
inline nv_bfloat16 __float2bfloat16(float f) { return nv_bfloat16{kernelsim_round(f, 8)}; }
inline nv_bfloat16 __hadd(nv_bfloat16 a, nv_bfloat16 b) { return __float2bfloat16(a.f + b.f); }
