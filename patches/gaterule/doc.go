// Package gaterule holds arpatch's SGLang-specific safety rule: a patched
// tree may open SGLang's custom allreduce gates on PCIe-only hosts only if
// the kernel's dispatch then launches a kernel, or throws, for every
// world size above 2 without full NVLink. Upstream's dispatch does
// neither there, so opening the gates alone returns unreduced data, fast
// and without an error.
//
// It judges effects, not labels: it reads the patched file itself (the
// in-memory result, before anything is written), preprocesses it as the
// host pass of a CUDA build does, expands the file's macros where they
// are invoked and follows every path through the whole body of
// CustomAllreduce::allreduce, from its entry, with full_nvlink_ false:
// into the case `switch (world_size_)` selects, and both ways through
// every condition it cannot decide (a forced algorithm, a byte threshold,
// an environment variable). A path that reaches a `return` or the end of
// allreduce without a `<<<...>>>` launch (or a cudaLaunchKernel call) and
// without a throw fails the rule. A path that meets what it does not
// follow (a loop holding a launch or a return, a goto, try/catch, a launch
// in a lambda or under a condition inside an expression, an upper-case
// macro the file does not define) fails too, saying what it met: the rule
// refuses what it cannot decide. Calls are not followed, so a launch in a
// helper function does not count.
//
// It does not know arpatch's patch engine; package patches applies the
// rule (patches.CheckResult) to the result of a series.
//
// Upstream facts it rests on:
//   - The dispatch is CustomAllreduce::allreduce, a `switch (world_size_)`
//     over REDUCE_CASE(2), (4), (6), (8) with a throwing default, after
//     argument checks that throw and CHECK_CUDA_SUCCESS (which throws).
//     Upstream: sgl-kernel/include/utils.h@84118acf50b3 (CHECK_CUDA_SUCCESS: throw cuda_error).
//     Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (CustomAllreduce::allreduce),
//     also at 8905cbd42f4a, where REDUCE_CASE is defined twice under
//     #ifndef USE_MUSA.
//   - From c32c4ef79cf5 the file lives under python/sglang/kernels/aot/.
//     Upstream: python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh@0bda0b168ad5
//     (CustomAllreduce::allreduce, byte-identical to the era-B file).
//   - The Python gates are the same in every era. Upstream:
//     python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@84118acf50b3
//     (CustomAllreduce.should_custom_ar), also at 8905cbd42f4a and
//     0bda0b168ad5. Upstream:
//     python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py@84118acf50b3
//     (can_use_custom_all_reduce_with_nvlink), also at 8905cbd42f4a and
//     0bda0b168ad5.
package gaterule
