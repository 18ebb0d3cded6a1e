// arpatch gate judge: the CUDA runtime as the host pass of a CUDA build
// sees it, for clang's CUDA mode without CUDA's own headers (-nocudainc).
// Declarations only: what the host code calls is defined in judge.cu,
// which records every kernel launch; device code is parsed and never
// built. Kernel launches (<<<...>>>) lower to cudaConfigureCall and
// cudaLaunch (clang's launch API when it knows no CUDA version).
#pragma once
// CUDA's include guards of cuda_runtime.h and the headers it includes,
// which a dispatch may test.
#define __CUDA_RUNTIME_H__
#define __CUDA_RUNTIME_API_H__
#define __DRIVER_TYPES_H__
#define __VECTOR_TYPES_H__
#define __HOST_DEFINES_H__
#define __DEVICE_TYPES_H__
#include <stdlib.h>
#include <string.h>

#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
// clang 14 refuses the implicit copy of a struct holding an array of
// __restrict__ pointers (upstream's RankData), which g++ accepts; the
// qualifier is an optimisation hint only.
#define __restrict__

// C++ headers after the attributes: clang's CUDA wrappers of <new>,
// <algorithm> and <complex> use them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

struct dim3 {
  unsigned x, y, z;
  __host__ __device__ constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint2 { unsigned x, y; };
struct uint3 { unsigned x, y, z; };
struct uint4 { unsigned x, y, z, w; };
struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct ulonglong2 { unsigned long long x, y; };
__host__ __device__ uint4 make_uint4(unsigned, unsigned, unsigned, unsigned);
__host__ __device__ float4 make_float4(float, float, float, float);
__host__ __device__ float2 make_float2(float, float);
extern const __device__ uint3 threadIdx, blockIdx;
extern const __device__ dim3 blockDim, gridDim;
extern const __device__ int warpSize;
__device__ void __syncthreads();
__device__ int __syncthreads_count(int);
__device__ int __syncthreads_or(int);
__device__ void __syncwarp(unsigned mask = 0xffffffffu);
__device__ void __threadfence();
__device__ void __threadfence_block();
__device__ void __threadfence_system();
__device__ void __nanosleep(unsigned);
__device__ unsigned __activemask();
__device__ long long clock64();
template <typename T>
__device__ T __ldg(const T*);
template <typename T>
__device__ T __shfl_sync(unsigned, T, int, int = 32);
template <typename T>
__device__ T __shfl_xor_sync(unsigned, T, int, int = 32);
template <typename T>
__device__ T __shfl_down_sync(unsigned, T, unsigned, int = 32);
template <typename T>
__device__ T __shfl_up_sync(unsigned, T, unsigned, int = 32);
template <typename T>
__device__ T atomicAdd(T*, T);
template <typename T>
__device__ T atomicCAS(T*, T, T);
template <typename T>
__device__ T atomicExch(T*, T);
template <typename T>
__device__ T atomicMax(T*, T);
template <typename T>
__device__ T atomicAdd_system(T*, T);
template <typename T>
__device__ T atomicCAS_system(T*, T, T);

// The toolkit's version as CUDA 12.8's headers give it (a build variant
// of the judge gives another: variants.go).
#ifndef CUDART_VERSION
#define CUDART_VERSION 12080
#endif
// An enum, as CUDA's own (driver_types.h: enum cudaError), so that a
// dispatch that asks the type's traits sees what the real build sees.
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNotSupported = 801,
};
typedef enum cudaError cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
struct cudaIpcMemHandle_t {
  char reserved[64];
};
struct cudaIpcEventHandle_t {
  char reserved[64];
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2
};
#define cudaIpcMemLazyEnablePeerAccess 0x01
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
struct cudaFuncAttributes {
  size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
  int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion;
};
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize, maxThreadsPerBlock, multiProcessorCount, major, minor;
};
enum cudaLaunchAttributeID {
  cudaLaunchAttributeIgnore = 0,
  cudaLaunchAttributeCooperative = 2,
  cudaLaunchAttributeProgrammaticStreamSerialization = 6,
};
union cudaLaunchAttributeValue {
  char pad[64];
  int cooperative;
  int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned numAttrs;
};

extern "C" {
cudaError_t cudaConfigureCall(dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = 0);
cudaError_t cudaSetupArgument(const void* arg, size_t size, size_t offset);
cudaError_t cudaLaunch(const void* func);
cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream);
cudaError_t cudaLaunchCooperativeKernel(
    const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorString(cudaError_t);
const char* cudaGetErrorName(cudaError_t);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDeviceCount(int*);
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaDeviceCanAccessPeer(int*, int, int);
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus*);
cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned);
cudaError_t cudaIpcCloseMemHandle(void*);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*);
cudaError_t cudaMalloc(void**, size_t);
cudaError_t cudaFree(void*);
cudaError_t cudaMemset(void*, int, size_t);
cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t);
cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int);
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes*, const void*);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int*, const void*, int, size_t);
cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t*, unsigned);
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04
// Streams a dispatch may make: each a new handle, never the call's, so a
// launch on one is seen as on another stream (cxx/judge.cu).
cudaError_t cudaStreamCreate(cudaStream_t*);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t*, unsigned, int);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaDeviceGetStreamPriorityRange(int*, int*);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned);
}

template <typename F>
cudaError_t cudaFuncSetAttribute(F* func, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}
template <typename F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F* func) {
  return cudaFuncGetAttributes(a, reinterpret_cast<const void*>(func));
}
template <typename F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F* func, int block, size_t shared) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, reinterpret_cast<const void*>(func), block, shared);
}
// The explicit launches' recorder (cxx/judge.cu): each argument's bytes,
// N of them, by the kernel's parameter types, so that they are checked as
// a <<<...>>> launch's are.
extern "C" cudaError_t arpatch_record_explicit(const void* func, dim3 grid, dim3 block, size_t shared,
                                               cudaStream_t stream, int n, const void* const* data,
                                               const size_t* sizes);
template <typename F>
cudaError_t cudaLaunchKernel(F* func, dim3 grid, dim3 block, void** args, size_t shared = 0, cudaStream_t stream = 0) {
  return cudaLaunchKernel(reinterpret_cast<const void*>(func), grid, block, args, shared, stream);
}
template <typename... A>
cudaError_t cudaLaunchKernel(void (*func)(A...), dim3 grid, dim3 block, void** args, size_t shared = 0,
                             cudaStream_t stream = 0) {
  const size_t sizes[sizeof...(A) + 1] = {sizeof(A)..., 0};
  return arpatch_record_explicit(reinterpret_cast<const void*>(func), grid, block, shared, stream,
                                 static_cast<int>(sizeof...(A)), args, sizes);
}
template <typename F>
cudaError_t cudaLaunchCooperativeKernel(
    F* func, dim3 grid, dim3 block, void** args, size_t shared = 0, cudaStream_t stream = 0) {
  return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(func), grid, block, args, shared, stream);
}
// As CUDA's own: the arguments are converted to the kernel's parameter
// types and passed by address (here to the recorder, with their sizes).
template <typename... ExpTypes>
cudaError_t arpatch_launch_ex(const cudaLaunchConfig_t* config, void (*kernel)(ExpTypes...), ExpTypes... conv) {
  const void* data[sizeof...(ExpTypes) + 1] = {static_cast<const void*>(&conv)..., nullptr};
  const size_t sizes[sizeof...(ExpTypes) + 1] = {sizeof(ExpTypes)..., 0};
  return arpatch_record_explicit(reinterpret_cast<const void*>(kernel), config->gridDim, config->blockDim,
                                 config->dynamicSmemBytes, config->stream, static_cast<int>(sizeof...(ExpTypes)), data,
                                 sizes);
}
template <typename... ExpTypes, typename... ActTypes>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(ExpTypes...), ActTypes&&... args) {
  return arpatch_launch_ex<ExpTypes...>(config, kernel, static_cast<ActTypes&&>(args)...);
}
