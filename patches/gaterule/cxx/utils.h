// arpatch gate judge: sgl-kernel's include/utils.h pulls in torch; the
// allreduce header takes only CHECK_CUDA_SUCCESS and cuda_error from it,
// restated here with upstream's meaning (a failed call throws).
// Upstream: sgl-kernel/include/utils.h@84118acf50b3 (cuda_error, CHECK_CUDA_SUCCESS)
#pragma once
#include <cuda_runtime.h>

#include <sstream>
#include <stdexcept>
#include <string>

struct cuda_error : public std::runtime_error {
  cuda_error(const char* message) : std::runtime_error(message) {}
  cuda_error(std::string const& message) : cuda_error{message.c_str()} {}
};
#define CHECK_CUDA_SUCCESS(cmd)                                         \
  do {                                                                  \
    cudaError_t e = cmd;                                                \
    if (e != cudaSuccess) {                                             \
      std::stringstream _message;                                       \
      auto s = cudaGetErrorString(e);                                   \
      _message << std::string(s) + "\n" << __FILE__ << ':' << __LINE__; \
      throw cuda_error(_message.str());                                 \
    }                                                                   \
  } while (0)
