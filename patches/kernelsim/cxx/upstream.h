// arpatch kernelsim: what the pcie series' added code needs from
// custom_all_reduce.cuh, written from upstream's definitions for a host
// build, so that the series' kernels run without an SGLang checkout (the
// tests use this; on a real tree kernelsim compiles the patched header
// itself). Layouts and semantics follow upstream:
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (Signal, RankData, RankSignals, array_t, packed_t, upcast, downcast, packed_assign_add, get_tmp_buf, st_flag_release, ld_flag_acquire, st_flag_volatile, ld_flag_volatile)
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace sglang {

constexpr int kMaxBlocks = 36;
using FlagType = uint32_t;
struct Signal {
  alignas(128) FlagType self_counter[kMaxBlocks][8];
  alignas(128) FlagType peer_counter[2][kMaxBlocks][8];
};
struct __align__(16) RankData {
  const void* __restrict__ ptrs[8];
};
struct __align__(16) RankSignals {
  Signal* signals[8];
};

template <typename T, int sz>
struct __align__(alignof(T) * sz) array_t {
  T data[sz];
  using type = T;
  static constexpr int size = sz;
};
template <typename T>
struct packed_t {
  using P = array_t<T, 16 / sizeof(T)>;
  using A = array_t<float, 16 / sizeof(T)>;
};

#define DINLINE __device__ __forceinline__

DINLINE float upcast_s(half v) { return __half2float(v); }
DINLINE float upcast_s(nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
DINLINE T downcast_s(float v);
template <>
DINLINE half downcast_s(float v) { return __float2half(v); }
template <>
DINLINE nv_bfloat16 downcast_s(float v) { return __float2bfloat16(v); }
DINLINE half& assign_add(half& a, half b) { return a = __hadd(a, b); }
DINLINE nv_bfloat16& assign_add(nv_bfloat16& a, nv_bfloat16 b) { return a = __hadd(a, b); }
DINLINE float& assign_add(float& a, float b) { return a += b; }

template <typename T, int N>
DINLINE array_t<T, N>& packed_assign_add(array_t<T, N>& a, array_t<T, N> b) {
  for (int i = 0; i < N; i++) assign_add(a.data[i], b.data[i]);
  return a;
}
template <typename T, int N>
DINLINE array_t<float, N> upcast(array_t<T, N> val) {
  if constexpr (std::is_same<T, float>::value) {
    return val;
  } else {
    array_t<float, N> out;
    for (int i = 0; i < N; i++) out.data[i] = upcast_s(val.data[i]);
    return out;
  }
}
template <typename O>
DINLINE O downcast(array_t<float, O::size> val) {
  if constexpr (std::is_same<typename O::type, float>::value) {
    return val;
  } else {
    O out;
    for (int i = 0; i < O::size; i++) out.data[i] = downcast_s<typename O::type>(val.data[i]);
    return out;
  }
}
// The flag stores and loads, as PTX: the device pass of the kernels
// (Source.Arch) runs them through ptx.go's emulation; the host pass never
// instantiates them.
DINLINE void st_flag_release(FlagType* addr, FlagType v) {
  asm volatile("st.release.sys.global.u32 [%1], %0;" ::"r"(v), "l"(addr));
}
DINLINE FlagType ld_flag_acquire(FlagType* addr) {
  FlagType v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(addr));
  return v;
}
DINLINE void st_flag_volatile(FlagType* addr, FlagType v) {
  asm volatile("st.volatile.global.u32 [%1], %0;" ::"r"(v), "l"(addr));
}
DINLINE FlagType ld_flag_volatile(FlagType* addr) {
  FlagType v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(addr));
  return v;
}

template <typename P>
DINLINE P* get_tmp_buf(Signal* sg) {
  return (P*)(((Signal*)sg) + 1);
}

}  // namespace sglang
