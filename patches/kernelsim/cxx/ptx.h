// arpatch kernelsim: what upstream's PTX flag stores and loads do, on the
// host, for the device pass of the kernels (ptx.go rewrites each known asm
// statement into one of these). A 32-bit store or load at the address,
// with the ordering of the PTX: st.release.sys as a release store,
// ld.acquire.sys as an acquire load, st.volatile and ld.volatile as relaxed
// ones, membar.sys and membar.gl as full fences. The host's orderings are
// stronger than the GPU's; see package kernelsim.
#pragma once
#include <sched.h>

template <typename V>
inline void kernelsim_ptx_store(void* addr, V v, int order) {
  static_assert(sizeof(V) == 4, "a u32 flag store takes a 32-bit register");
  unsigned* p = static_cast<unsigned*>(addr);
  const unsigned u = static_cast<unsigned>(v);
  if (order == 3) __atomic_thread_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(p, u, order == 1 ? __ATOMIC_RELEASE : __ATOMIC_RELAXED);
}

template <typename V>
inline void kernelsim_ptx_load(const void* addr, V* out, int order) {
  static_assert(sizeof(V) == 4, "a u32 flag load fills a 32-bit register");
  sched_yield();  // a polling thread lets the others run (as cuda_runtime.h's __atomic_load_n)
  const unsigned* p = static_cast<const unsigned*>(addr);
  *out = static_cast<V>(__atomic_load_n(p, order == 2 ? __ATOMIC_ACQUIRE : __ATOMIC_RELAXED));
  if (order == 4) __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
