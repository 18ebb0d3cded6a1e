// arpatch gate judge driver: compiled with the patched
// custom_all_reduce.cuh by clang's CUDA host pass (device code is parsed,
// never built), it constructs CustomAllreduce as sgl-kernel's
// init_custom_ar does and calls allreduce as all_reduce does, and records
// what each call launches. It judges nothing: package gaterule reads its
// report.
//
// Input (stdin), whitespace-separated:
//   sizes N B1 ... BN        the allreduce sizes to call, in bytes
//   scenario ID WS RANK NVL CAP CALLS NENV   then NENV lines KEY=VALUE
// For each scenario it clears the environment, sets the NENV variables,
// constructs CustomAllreduce for RANK of WS ranks (full_nvlink NVL) with
// CAP bytes of scratch after each Signal and CAP bytes of rank data,
// registers one buffer per rank, and calls allreduce<T> for float, half
// and nv_bfloat16 at every size, eager (the registered buffer) and under
// stream capture (as a CUDA graph records it): CALLS is a bit mask of
// those six (bit 0 eager float, 1 eager half, 2 eager nv_bfloat16, 3-5
// the same under capture).
//
// Output (stdout), one JSON object a line:
//   {"scenario":ID,"init":"ok","world_size":W,"full_nvlink":N} (the
//     members as the constructor set them, -1 where the class has none) or {"scenario":ID,"init":"throw","what":W}
//   {"scenario":ID,"mode":"eager"|"graph","dtype":D,"runs":[RUN...]}
//     RUN is [FROM,TO,KIND,...]: the sizes FROM..TO (bytes, of those
//     asked) that did the same: ["one",KERNEL] exactly one launch of a
//     non-empty grid; ["throw",WHAT]; ["none"] no launch; ["many",N,K1,K2]
//     more than one launch; ["empty",KERNEL,GX,GY,GZ,BX,BY,BZ] a launch of
//     an empty or oversized grid or block; ["wrong",KERNEL,WHY] one launch
//     of a kernel arpatch knows (upstream's pull kernels, the pcie series'
//     push kernels) for another type, world size or arguments than the
//     call's.
//   {"getenv":[NAME...]} every variable the header read; {"done":true}.
// A crash or a hang prints {"stopped":WHY,"at":WHERE} and exits 3.
#include "prelude.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <csignal>
#include <sys/mman.h>
#include <unistd.h>

#include "custom_all_reduce.cuh"

extern char** environ;

namespace {

// A launch: its configuration, the kernel's host stub, and its
// arguments, one byte string each, in parameter order.
struct Launch {
  dim3 grid, block;
  const void* fn;
  std::vector<std::string> params;
  cudaStream_t stream;
  size_t shared;  // dynamic shared memory, bytes
};

std::vector<Launch> launches;
// The stream every call is made on (the entries below).
const cudaStream_t kCallStream = reinterpret_cast<cudaStream_t>(0x1000);
// The most dynamic shared memory a block may have on any GPU arpatch
// builds for (227 KiB: sm_90, sm_100); sm_120 has less.
const size_t kMaxShared = 232448;
std::vector<std::string> pending_params;
dim3 pending_grid, pending_block;
cudaStream_t pending_stream = nullptr;
size_t pending_shared = 0;
// Copies and memsets made (cudaMemcpy*, cudaMemset*).
volatile unsigned long device_writes = 0;
cudaError_t last_error = cudaSuccess;
bool capturing = false;
char where[512] = "before the first call";

// getenv's names, kept in a fixed array: getenv may run before any
// constructor of this file.
char seen_names[256][128];
int n_seen = 0;

void note_name(const char* name) {
  for (int i = 0; i < n_seen; i++) {
    if (std::strncmp(seen_names[i], name, sizeof seen_names[i] - 1) == 0) return;
  }
  if (n_seen < 256) {
    std::strncpy(seen_names[n_seen], name, sizeof seen_names[0] - 1);
    n_seen++;
  }
}

// Allocations: fake device addresses in a reserved, inaccessible range, so
// host code that dereferences device memory crashes here as on a host.
struct Alloc {
  uintptr_t base;
  size_t size;
};
std::vector<Alloc> allocs;
char* arena = nullptr;
size_t arena_size = 0, arena_used = 0;

void* fake_alloc(size_t n) {
  n = (n + 4095) & ~size_t(4095);
  if (arena_used + n > arena_size) {
    std::fprintf(stderr, "judge: arena exhausted\n");
    std::exit(2);
  }
  void* p = arena + arena_used;
  arena_used += n + 4096;  // a guard page between allocations
  allocs.push_back({reinterpret_cast<uintptr_t>(p), n});
  return p;
}

bool valid_dims(dim3 d, unsigned max_x, unsigned max_yz) {
  return d.x > 0 && d.y > 0 && d.z > 0 && d.x <= max_x && d.y <= max_yz && d.z <= max_yz;
}

cudaError_t record(const void* fn, dim3 grid, dim3 block, std::vector<std::string> params, cudaStream_t stream,
                   size_t shared) {
  launches.push_back({grid, block, fn, std::move(params), stream, shared});
  const bool ok = valid_dims(grid, 0x7fffffffu, 65535) && valid_dims(block, 1024, 1024) &&
                  uint64_t(block.x) * block.y * block.z <= 1024;
  if (!ok) last_error = cudaErrorInvalidConfiguration;
  return ok ? cudaSuccess : cudaErrorInvalidConfiguration;
}

}  // namespace

extern "C" {
char* getenv(const char* name) noexcept {
  note_name(name);
  const size_t n = std::strlen(name);
  for (char** e = environ; e && *e; e++) {
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  }
  return nullptr;
}
char* secure_getenv(const char* name) noexcept { return getenv(name); }

cudaError_t cudaConfigureCall(dim3 grid, dim3 block, size_t shared, cudaStream_t stream) {
  pending_grid = grid;
  pending_block = block;
  pending_stream = stream;
  pending_shared = shared;
  return cudaSuccess;
}
cudaError_t cudaSetupArgument(const void* arg, size_t size, size_t) {
  pending_params.emplace_back(static_cast<const char*>(arg), size);
  return cudaSuccess;
}
__attribute__((noinline)) cudaError_t cudaLaunch(const void* fn) {
  cudaError_t e = record(fn, pending_grid, pending_block, std::move(pending_params), pending_stream, pending_shared);
  pending_params.clear();
  return e;
}
// The four launches above and below stay calls (noinline): the path proof
// (irproof.go) reads a call of one of them in the compiled IR as a launch.
// The explicit launches of a kernel's address alone pass their arguments'
// addresses without sizes: those are not checked; the typed overloads in
// cuda_runtime.h record through arpatch_record_explicit, sizes and all.
__attribute__((noinline)) cudaError_t cudaLaunchKernel(const void* fn, dim3 grid, dim3 block, void**, size_t shared, cudaStream_t stream) {
  return record(fn, grid, block, {}, stream, shared);
}
__attribute__((noinline)) cudaError_t cudaLaunchCooperativeKernel(const void* fn, dim3 grid, dim3 block, void**, size_t shared, cudaStream_t stream) {
  return record(fn, grid, block, {}, stream, shared);
}
__attribute__((noinline)) cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* c, const void* fn, void**) {
  return record(fn, c->gridDim, c->blockDim, {}, c->stream, c->dynamicSmemBytes);
}
__attribute__((noinline)) cudaError_t arpatch_record_explicit(const void* fn, dim3 grid, dim3 block, size_t shared,
                                                                cudaStream_t stream, int n, const void* const* data,
                                                                const size_t* sizes) {
  std::vector<std::string> params;
  for (int i = 0; i < n; i++) params.emplace_back(static_cast<const char*>(data[i]), sizes[i]);
  return record(fn, grid, block, std::move(params), stream, shared);
}
cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }
const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorInvalidConfiguration ? "invalid configuration argument" : "arpatch gate judge: no GPU";
}
const char* cudaGetErrorName(cudaError_t) { return "cudaError"; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 8;
  return cudaSuccess;
}
// An sm_90 GPU with 132 SMs (an H100/H200).
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock:
      *v = 1024;
      break;
    case cudaDevAttrMultiProcessorCount:
      *v = 132;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *v = 9;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *v = 48 * 1024;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *v = 227 * 1024;
      break;
    default:
      *v = 0;
  }
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->name, "arpatch gate judge");
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->multiProcessorCount = 132;
  p->major = 9;
  p->sharedMemPerBlock = 48 * 1024;
  return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int* v, int, int) {
  *v = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* s) {
  *s = capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t, unsigned) {
  *p = fake_alloc(4096);
  return cudaSuccess;
}
cudaError_t cudaIpcCloseMemHandle(void*) { return cudaSuccess; }
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* h, void*) {
  std::memset(h, 0, sizeof *h);
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = fake_alloc(n);
  return cudaSuccess;
}
cudaError_t cudaFree(void*) { return cudaSuccess; }
// Kept as calls (noinline): the path proof refuses a dispatch that calls one
// (irproof.go, deviceWriters); each counts, so that none is a call without
// an effect, which the optimizer would drop.
__attribute__((noinline)) cudaError_t cudaMemset(void*, int, size_t) {
  device_writes++;
  return cudaSuccess;
}
__attribute__((noinline)) cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t) {
  device_writes++;
  return cudaSuccess;
}
__attribute__((noinline)) cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind) {
  device_writes++;
  return cudaSuccess;
}
__attribute__((noinline)) cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t) {
  device_writes++;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int, size_t) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = nullptr;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned, int) {
  static uintptr_t next = 0x2000;
  *s = reinterpret_cast<cudaStream_t>(next += 0x10);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned f) { return cudaStreamCreateWithPriority(s, f, 0); }
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithPriority(s, 0, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceGetStreamPriorityRange(int* lo, int* hi) {
  *lo = 0;
  *hi = -5;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
CUresult cuGetErrorString(CUresult, const char** s) {
  *s = "arpatch gate judge: no GPU";
  return CUDA_SUCCESS;
}
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  for (const Alloc& a : allocs) {
    if (ptr < a.base || ptr >= a.base + a.size) continue;
    if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
      *static_cast<CUdeviceptr*>(data) = a.base;
    } else if (attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
      *static_cast<size_t*>(data) = a.size;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}
}

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// kernel_name names a launched kernel from its host stub:
// "sglang::pcie_push_1shot<float, 8>".
std::string kernel_name(const void* fn) {
  Dl_info info;
  if (dladdr(fn, &info) == 0 || info.dli_sname == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : info.dli_sname;
  std::free(d);
  const std::string stub = "__device_stub__";
  if (size_t at = s.find(stub); at != std::string::npos) s.erase(at, stub.size());
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  int depth = 0;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '<') depth++;
    if (s[i] == '>') depth--;
    if (s[i] == '(' && depth == 0) return s.substr(0, i);
  }
  return s;
}

// Expect is what one call asked the dispatch for.
struct Expect {
  const void* input;
  const void* output;
  int rank, ws, packs;
  const char* type;  // the element type as kernel_name writes it
};

// Kernels arpatch knows, with the parameter indexes of their input (-1:
// none, upstream's pull kernels take the registered buffers), output,
// rank and size: upstream's pull kernels and the pcie series' push ones.
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (cross_device_reduce_1stage, cross_device_reduce_2stage)
struct Family {
  const char* name;
  int input, output, rank, size;
};
const Family families[] = {
    {"sglang::cross_device_reduce_1stage", -1, 3, 4, 5}, {"sglang::cross_device_reduce_2stage", -1, 3, 4, 5},
    {"sglang::pcie_push_1shot", 0, 1, 4, 5},           {"sglang::pcie_push_2shot", 0, 1, 4, 5},
    {"sglang::pcie_push_island", 0, 1, 4, 5},
};

bool param_is(const std::string& p, const void* want) {
  return p.size() == sizeof want && std::memcmp(p.data(), &want, sizeof want) == 0;
}
bool param_is(const std::string& p, int want) {
  return p.size() == sizeof want && std::memcmp(p.data(), &want, sizeof want) == 0;
}

// kernel_fault says why launch l, of kernel name, does not do call e:
// another element type or world size than the call's, or arguments
// (pointers, rank, size) that are not the call's; "" when it does, or
// when arpatch does not know the kernel (the judge notes those).
std::string kernel_fault(const Launch& l, const std::string& name, const Expect& e) {
  for (const Family& f : families) {
    const std::string prefix = std::string(f.name) + "<";
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string args = name.substr(prefix.size(), name.size() - prefix.size() - 1);
    const std::string want = std::string(e.type) + ", " + std::to_string(e.ws);
    if (args != want) return "instantiated for <" + args + "> where the call is <" + want + ">";
    // A kernel arpatch knows, launched by its address alone
    // (cudaLaunchKernel with a const void*): its arguments come without
    // their types, so what it gets cannot be checked.
    if (l.params.empty()) return "by its address alone, so that its arguments cannot be checked (launch it with <<<...>>>, or cudaLaunchKernel with the kernel itself)";
    const int n = static_cast<int>(l.params.size());
    if (f.input >= 0 && (f.input >= n || !param_is(l.params[f.input], e.input))) return "with another input than the call's";
    if (f.output >= n || !param_is(l.params[f.output], e.output)) return "with another output than the call's";
    if (f.rank >= n || !param_is(l.params[f.rank], e.rank)) return "with another rank than the communicator's";
    if (f.size >= n || !param_is(l.params[f.size], e.packs)) {
      int got = 0;
      if (f.size < n && l.params[f.size].size() == sizeof got) std::memcpy(&got, l.params[f.size].data(), sizeof got);
      return "with a size of " + std::to_string(got) + " packed elements where the call has " + std::to_string(e.packs);
    }
    return "";
  }
  return "";
}

// outcome is what one call did, as a RUN's tail.
std::string outcome(bool threw, const std::string& what, const Expect& e) {
  if (threw) return "\"throw\"," + quote(what);
  if (launches.empty()) return "\"none\"";
  if (launches.size() > 1) {
    return "\"many\"," + std::to_string(launches.size()) + "," + quote(kernel_name(launches[0].fn)) + "," +
           quote(kernel_name(launches[1].fn));
  }
  const Launch& l = launches[0];
  const bool ok = valid_dims(l.grid, 0x7fffffffu, 65535) && valid_dims(l.block, 1024, 1024) &&
                  uint64_t(l.block.x) * l.block.y * l.block.z <= 1024;
  if (ok) {
    const std::string name = kernel_name(l.fn);
    // On another stream than the call's, the kernel races the work around
    // it, and a CUDA graph being captured never records it.
    if (l.stream != kCallStream) return "\"wrong\"," + quote(name) + "," + quote("on another stream than the call's");
    // More dynamic shared memory than a block may have (227 KiB on the
    // largest GPUs): the launch fails, and nothing runs.
    if (l.shared > kMaxShared) {
      return "\"wrong\"," + quote(name) + "," +
             quote("with " + std::to_string(l.shared) + " bytes of dynamic shared memory, over the 232448 a block may have");
    }
    const std::string fault = kernel_fault(l, name, e);
    if (!fault.empty()) return "\"wrong\"," + quote(name) + "," + quote(fault);
    return "\"one\"," + quote(name);
  }
  char buf[128];
  std::snprintf(
      buf, sizeof buf, ",%u,%u,%u,%u,%u,%u", l.grid.x, l.grid.y, l.grid.z, l.block.x, l.block.y, l.block.z);
  return "\"empty\"," + quote(kernel_name(l.fn)) + buf;
}

template <typename T>
const char* type_name() {
  if (std::is_same_v<T, float>) return "float";
  if (std::is_same_v<T, half>) return "__half";
  return "__nv_bfloat16";
}

}  // namespace

// The entries the path proof (irproof.go) starts from: allreduce<T> as
// all_reduce calls it (the size as out.numel(), an int64_t, so that the
// overload the binding picks is the one called), one extern "C" name a
// type, kept as calls.
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cu@84118acf50b3 (all_reduce)
extern "C" {
__attribute__((noinline)) void arpatch_judge_allreduce_float(sglang::CustomAllreduce* ca, float* in, float* out, int64_t n) {
  ca->allreduce<float>(kCallStream, in, out, n);
}
__attribute__((noinline)) void arpatch_judge_allreduce_half(sglang::CustomAllreduce* ca, half* in, half* out, int64_t n) {
  ca->allreduce<half>(kCallStream, in, out, n);
}
__attribute__((noinline)) void arpatch_judge_allreduce_bfloat16(sglang::CustomAllreduce* ca, nv_bfloat16* in,
                                                                nv_bfloat16* out, int64_t n) {
  ca->allreduce<nv_bfloat16>(kCallStream, in, out, n);
}
}

namespace {

// world_of and nvlink_of read the members the dispatch tests, where the
// class has them (else -1): the driver reports what the constructor set,
// and the path proof folds each load of them to that value. The functions
// arpatch_field_world_size and arpatch_field_full_nvlink are where the
// proof learns how the compiled code addresses each member.
template <typename C>
auto world_of(C* c, int) -> decltype(int(c->world_size_)) { return c->world_size_; }
template <typename C>
int world_of(C*, long) { return -1; }
template <typename C>
auto nvlink_of(C* c, int) -> decltype(int(c->full_nvlink_)) { return c->full_nvlink_ ? 1 : 0; }
template <typename C>
int nvlink_of(C*, long) { return -1; }

}  // namespace

extern "C" {
// The one place the driver constructs CustomAllreduce: the path proof
// takes it as a constructor (irproof.go, ctorRe), wherever the compiler
// inlines the tree's constructor.
__attribute__((noinline)) sglang::CustomAllreduce* arpatch_construct(sglang::Signal** signals, void* rank_data, size_t cap,
                                                                      int rank, int ws, bool nvl) {
  return new sglang::CustomAllreduce(signals, rank_data, cap, rank, ws, nvl);
}
__attribute__((noinline)) int arpatch_field_world_size(sglang::CustomAllreduce* c) { return world_of(c, 0); }
__attribute__((noinline)) int arpatch_field_full_nvlink(sglang::CustomAllreduce* c) { return nvlink_of(c, 0); }
}

namespace {

void judge_call(sglang::CustomAllreduce* ca, float* in, float* out, int64_t n) { arpatch_judge_allreduce_float(ca, in, out, n); }
void judge_call(sglang::CustomAllreduce* ca, half* in, half* out, int64_t n) { arpatch_judge_allreduce_half(ca, in, out, n); }
void judge_call(sglang::CustomAllreduce* ca, nv_bfloat16* in, nv_bfloat16* out, int64_t n) {
  arpatch_judge_allreduce_bfloat16(ca, in, out, n);
}

template <typename T>
void calls(sglang::CustomAllreduce* ca, int id, int rank, int ws, T* input, T* output, const std::vector<size_t>& sizes,
           const char* dtype) {
  std::string runs;
  std::string prev, prev_key;
  size_t from = 0, to = 0;
  auto flush = [&]() {
    if (prev.empty()) return;
    runs += std::string(runs.empty() ? "" : ",") + "[" + std::to_string(from) + "," + std::to_string(to) + "," +
            prev + "]";
  };
  for (size_t bytes : sizes) {
    std::snprintf(where, sizeof where, "scenario %d, %s allreduce<%s> of %zu bytes", id,
                  capturing ? "graph" : "eager", dtype, bytes);
    launches.clear();
    last_error = cudaSuccess;
    bool threw = false;
    std::string what;
    try {
      judge_call(ca, input, output, static_cast<int64_t>(bytes / sizeof(T)));
    } catch (const std::exception& e) {
      threw = true;
      what = e.what();
    } catch (...) {
      threw = true;
      what = "an exception that is not a std::exception";
    }
    const Expect e{input, output, rank, ws, static_cast<int>(bytes / 16), type_name<T>()};
    std::string o = outcome(threw, what, e);
    // Throws that differ in their numbers only (the size they name), and
    // empty launches that differ in their grid, are one run, reported with
    // the first.
    std::string k = o;
    if (threw || o.rfind("\"empty\"", 0) == 0 || o.rfind("\"wrong\"", 0) == 0) k.erase(std::remove_if(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }), k.end());
    if (k != prev_key) {
      flush();
      prev = o;
      prev_key = k;
      from = bytes;
    }
    to = bytes;
  }
  flush();
  std::printf("{\"scenario\":%d,\"mode\":\"%s\",\"dtype\":\"%s\",\"runs\":[%s]}\n", id, capturing ? "graph" : "eager",
              dtype, runs.c_str());
}

void scenario(int id, int ws, int rank, bool nvl, size_t cap, unsigned mask, const std::vector<std::string>& env,
              const std::vector<size_t>& sizes) {
  clearenv();
  for (const std::string& kv : env) {
    const size_t eq = kv.find('=');
    setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  arena_used = 0;
  allocs.clear();
  sglang::Signal* signals[8];
  void* buffers[8];
  for (int r = 0; r < 8; r++) signals[r] = static_cast<sglang::Signal*>(fake_alloc(sizeof(sglang::Signal) + cap));
  for (int r = 0; r < 8; r++) buffers[r] = fake_alloc(cap);
  void* rank_data = fake_alloc(cap);
  void* output = fake_alloc(cap);
  std::snprintf(where, sizeof where, "scenario %d, constructing CustomAllreduce", id);
  sglang::CustomAllreduce* ca = nullptr;
  try {
    ca = arpatch_construct(signals, rank_data, cap, rank, ws, nvl);
    ca->register_buffer(buffers);
  } catch (const std::exception& e) {
    std::printf("{\"scenario\":%d,\"init\":\"throw\",\"what\":%s}\n", id, quote(e.what()).c_str());
    return;
  } catch (...) {
    std::printf("{\"scenario\":%d,\"init\":\"throw\",\"what\":\"an exception that is not a std::exception\"}\n", id);
    return;
  }
  std::printf("{\"scenario\":%d,\"init\":\"ok\",\"world_size\":%d,\"full_nvlink\":%d}\n", id,
              arpatch_field_world_size(ca), arpatch_field_full_nvlink(ca));
  for (int graph = 0; graph < 2; graph++) {
    capturing = graph != 0;
    const unsigned bits = mask >> (3 * graph);
    if (bits & 1) calls(ca, id, rank, ws, static_cast<float*>(buffers[rank]), static_cast<float*>(output), sizes, "float32");
    if (bits & 2) calls(ca, id, rank, ws, static_cast<half*>(buffers[rank]), static_cast<half*>(output), sizes, "float16");
    if (bits & 4) {
      calls(ca, id, rank, ws, static_cast<nv_bfloat16*>(buffers[rank]), static_cast<nv_bfloat16*>(output), sizes, "bfloat16");
    }
  }
  capturing = false;
  // Not deleted: a destructor that throws or crashes is not the dispatch's
  // business, and the process ends soon.
}

void stopped(int sig) {
  char buf[700];
  const char* why = sig == SIGALRM ? "hang" : sig == SIGSEGV || sig == SIGBUS ? "crash" : "abort";
  int n = std::snprintf(buf, sizeof buf, "{\"stopped\":\"%s\",\"at\":\"%s\"}\n", why, where);
  if (n > 0) (void)!write(1, buf, static_cast<size_t>(n) < sizeof buf ? n : sizeof buf - 1);
  _exit(3);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOFBF, 1 << 16);
  for (int s : {SIGALRM, SIGSEGV, SIGBUS, SIGABRT, SIGFPE}) std::signal(s, [](int sig) {
      std::fflush(stdout);
      stopped(sig);
    });
  alarm(120);
  arena_size = size_t(1) << 36;
  void* a = mmap(nullptr, arena_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (a == MAP_FAILED) {
    std::fprintf(stderr, "judge: cannot reserve address space\n");
    return 2;
  }
  arena = static_cast<char*>(a);
  std::string word;
  std::vector<size_t> sizes;
  while (std::cin >> word) {
    if (word == "sizes") {
      size_t n;
      std::cin >> n;
      sizes.resize(n);
      for (size_t& b : sizes) std::cin >> b;
    } else if (word == "scenario") {
      int id, ws, rank, nvl, nenv;
      size_t cap;
      unsigned mask;
      std::cin >> id >> ws >> rank >> nvl >> cap >> mask >> nenv;
      std::string line;
      std::getline(std::cin, line);
      std::vector<std::string> env(nenv);
      for (std::string& kv : env) std::getline(std::cin, kv);
      scenario(id, ws, rank, nvl != 0, cap, mask, env, sizes);
    } else {
      std::fprintf(stderr, "judge: unknown input %s\n", word.c_str());
      return 2;
    }
  }
  std::string names;
  for (int i = 0; i < n_seen; i++) names += std::string(i ? "," : "") + quote(seen_names[i]);
  std::printf("{\"getenv\":[%s]}\n{\"done\":true}\n", names.c_str());
  return 0;
}
