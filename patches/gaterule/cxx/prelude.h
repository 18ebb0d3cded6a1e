// arpatch gate judge: included before custom_all_reduce.cuh, as
// custom_all_reduce.cu includes torch's headers before it: the standard
// library and the CUDA types those bring, and the c10 checks the header may use (each
// throws, as c10::Error does).
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace c10 {
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace c10
#define TORCH_CHECK(cond, ...) \
  do {                         \
    if (!(cond)) throw c10::Error("TORCH_CHECK(" #cond ") failed"); \
  } while (0)
#define TORCH_CHECK_EQ(a, b) TORCH_CHECK((a) == (b))
#define TORCH_CHECK_NE(a, b) TORCH_CHECK((a) != (b))
#define TORCH_CHECK_LE(a, b) TORCH_CHECK((a) <= (b))
#define TORCH_CHECK_LT(a, b) TORCH_CHECK((a) < (b))
#define TORCH_CHECK_GE(a, b) TORCH_CHECK((a) >= (b))
#define TORCH_CHECK_GT(a, b) TORCH_CHECK((a) > (b))
#define TORCH_INTERNAL_ASSERT(cond, ...) TORCH_CHECK(cond)
#define AT_CUDA_CHECK(cmd) TORCH_CHECK((cmd) == cudaSuccess)
#define C10_CUDA_CHECK(cmd) TORCH_CHECK((cmd) == cudaSuccess)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
