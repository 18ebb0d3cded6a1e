// arpatch kernelsim: sgl-kernel's include/utils.h pulls in torch; the
// allreduce header needs only CHECK_CUDA_SUCCESS from it (which throws).
// Upstream: sgl-kernel/include/utils.h@84118acf50b3 (CHECK_CUDA_SUCCESS).
#pragma once
#include <cuda_runtime.h>
#include <stdexcept>
#define CHECK_CUDA_SUCCESS(cmd)                                          \
  do {                                                                   \
    if ((cmd) != cudaSuccess) throw std::runtime_error("CUDA: " #cmd); \
  } while (0)
