// arpatch kernelsim: half as a float that rounds to half's precision on
// every conversion (11 significant bits), enough to carry the small
// integers the sums are checked with exactly.
#pragma once
#include <cmath>
struct half {
  float f;
};
inline float kernelsim_round(float f, int bits) {
  if (f == 0 || !std::isfinite(f)) return f;
  int e;
  std::frexp(f, &e);
  const float q = std::ldexp(1.0f, e - bits);
  return std::nearbyint(f / q) * q;
}
inline float __half2float(half h) { return h.f; }
inline half __float2half(float f) { return half{kernelsim_round(f, 11)}; }
inline half __hadd(half a, half b) { return __float2half(a.f + b.f); }
