// arpatch kernelsim driver: runs the pcie series' PCIe-only settings and
// push kernels on the CPU. kernels.h (written by kernelsim) holds
// namespace sglang: the patched custom_all_reduce.cuh itself, or
// upstream.h with the series' added blocks.
//
//   driver parse WS CAP [BYTES...]
//     Constructs CustomAllreduce for rank 0 of WS PCIe-only ranks (full_nvlink
//     false) with CAP bytes of scratch after its Signal, under the process's
//     environment, and prints one JSON line: the schedule, auto, the islands,
//     the scratch size and pcie_algo_for(BYTES) for each BYTES; or the error
//     the constructor threw. It prints too the layout (the sizes of Signal,
//     RankSignals and PcieIslands), the bytes of the constructor's
//     pcie_islands_ and those of pcie_parse_islands(WS), so that two builds
//     (the host pass and a device pass) can be compared.
//   driver reduce DTYPE WS ALGO ISLANDS THREADS SEED CALLS [PACKS [SECONDS]]
//     Runs CALLS allreduces on WS emulated ranks, each rank's calls in order
//     on its own stream (a rank starts call k+1 when its call k is done, not
//     when every rank's is), with ALGO (push1, push2, island, or mixed: one
//     chosen per call), ISLANDS as SGLANG_PCIE_CUSTOM_AR_ISLANDS ("-": one
//     island), THREADS threads per block, 1-3 blocks and sizes from 1 packed
//     element up (fixed edge sizes first, then drawn from SEED; PACKS, a
//     comma-separated list, gives the sizes instead, in packed elements,
//     call i taking the i-th modulo its length). It checks
//     every element of every rank's output against the exact sum and against
//     rank 0's bits, and prints one JSON line: ok, or the first mismatch.
//     SECONDS (default 120) is when it stops, saying the ranks hang.
//
// Built with -DKERNELSIM_NARROW it instantiates float32 at world size 8
// alone, which compiles several times faster; with -DKERNELSIM_PARSE_ONLY
// it has the parse command alone and instantiates no kernel.
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <map>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels.h"

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
static thread_local pthread_barrier_t* block_barrier;
void __syncthreads() { pthread_barrier_wait(block_barrier); }

static std::map<uintptr_t, size_t> allocations;
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  auto it = allocations.upper_bound(ptr);
  if (it == allocations.begin()) return 1;
  --it;
  if (ptr >= it->first + it->second) return 1;
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
    *static_cast<CUdeviceptr*>(data) = it->first;
  } else {
    *static_cast<size_t*>(data) = it->second;
  }
  return 0;
}

using sglang::CustomAllreduce;
using sglang::RankSignals;
using sglang::Signal;

static std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// hex is the bytes at p, in hex.
static std::string hex(const void* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; i++) {
    const unsigned char b = static_cast<const unsigned char*>(p)[i];
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

static int parse(int ws, size_t cap, const std::vector<size_t>& sizes) {
  std::vector<char> buf(sizeof(Signal) + cap, 0);
  allocations[reinterpret_cast<uintptr_t>(buf.data())] = buf.size();
  Signal* signals[8];
  for (auto& s : signals) s = reinterpret_cast<Signal*>(buf.data());
  std::vector<char> rank_data(1 << 12);
  // Zeroed storage: the bytes of members the constructor leaves unset are
  // the same in every build, so that two builds' islands compare.
  alignas(CustomAllreduce) static unsigned char storage[sizeof(CustomAllreduce)];
  std::memset(storage, 0, sizeof storage);
  try {
    std::unique_ptr<CustomAllreduce, void (*)(CustomAllreduce*)> owner(
        new (storage) CustomAllreduce(signals, rank_data.data(), rank_data.size(), 0, ws, false),
        [](CustomAllreduce* p) { p->~CustomAllreduce(); });
    CustomAllreduce& ca = *owner;
    std::string out = "{\"layout\":" +
                      quote("Signal=" + std::to_string(sizeof(Signal)) + " RankSignals=" + std::to_string(sizeof(RankSignals)) +
                            " PcieIslands=" + std::to_string(sizeof(sglang::PcieIslands))) +
                      ",\"islands_hex\":" + quote(hex(&ca.pcie_islands_, sizeof ca.pcie_islands_)) + ",\"parsed_hex\":";
    try {
      sglang::PcieIslands parsed{};
      std::memset(&parsed, 0, sizeof parsed);
      parsed = CustomAllreduce::pcie_parse_islands(ws);
      out += quote(hex(&parsed, sizeof parsed));
    } catch (const std::exception& e) {
      out += quote(std::string("error: ") + e.what());
    }
    out += ",\"schedule\":[";
    for (size_t i = 0; i < ca.pcie_schedule_.size(); i++) {
      const auto& s = ca.pcie_schedule_[i];
      out += std::string(i ? "," : "") + "[" + quote(CustomAllreduce::pcie_algo_name(s.algo)) + "," +
             (s.max_bytes == std::numeric_limits<size_t>::max() ? "null" : std::to_string(s.max_bytes)) + "]";
    }
    out += std::string("],\"auto\":") + (ca.pcie_auto_ ? "true" : "false") + ",\"islands\":[";
    for (int g = 0; g < ca.pcie_islands_.count; g++) {
      out += g ? ",[" : "[";
      for (int j = 0; j < ca.pcie_islands_.size; j++) {
        out += (j ? "," : "") + std::to_string(ca.pcie_islands_.member[g][j]);
      }
      out += "]";
    }
    out += "],\"scratch\":" + std::to_string(ca.pcie_scratch_bytes_) + ",\"algos\":[";
    for (size_t i = 0; i < sizes.size(); i++) {
      out += i ? "," : "";
      try {
        out += quote(CustomAllreduce::pcie_algo_name(ca.pcie_algo_for(sizes[i])));
      } catch (const std::exception& e) {
        out += "{\"error\":" + quote(e.what()) + "}";
      }
    }
    std::printf("%s]}\n", out.c_str());
  } catch (const std::invalid_argument& e) {
    std::printf("{\"error\":%s,\"kind\":\"invalid_argument\"}\n", quote(e.what()).c_str());
  } catch (const std::exception& e) {
    std::printf("{\"error\":%s,\"kind\":\"runtime_error\"}\n", quote(e.what()).c_str());
  }
  return 0;
}

#ifndef KERNELSIM_PARSE_ONLY
template <typename T>
static float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return v.f;
  }
}
template <typename T>
static T from_float(float f) {
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else if constexpr (std::is_same_v<T, half>) {
    return __float2half(f);
  } else {
    return __float2bfloat16(f);
  }
}

// The input of rank r at call c, element e: small integers, exact in
// every type and in every partial sum.
static float input(int c, int r, int e) { return static_cast<float>((e + c) % 7 + r + 1); }

// packs_given are the sizes of reduce's PACKS argument, or none.
static std::vector<int> packs_given;

struct Call {
  int algo;  // 0 push1, 1 push2, 2 island
  int packs;
  int blocks;
};

template <typename T, int N>
static int reduce(const char* algo_name, const sglang::PcieIslands& islands, int threads, unsigned seed, int ncalls) {
  constexpr int d = 16 / sizeof(T);
  const char* names[] = {"push1", "push2", "island"};
  std::mt19937 rng(seed);
  std::vector<Call> calls;
  const int edges[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 257};
  int max_packs = 0;
  for (int i = 0; i < ncalls; i++) {
    Call c;
    const std::string a(algo_name);
    c.algo = a == "push1" ? 0 : a == "push2" ? 1 : a == "island" ? 2 : static_cast<int>(rng() % 3);
    c.packs = i < static_cast<int>(sizeof edges / sizeof edges[0]) ? edges[i] : 1 + static_cast<int>(rng() % 300);
    if (!packs_given.empty()) c.packs = packs_given[i % packs_given.size()];
    c.blocks = 1 + static_cast<int>(rng() % 3);
    c.blocks = std::min(c.blocks, (c.packs + threads - 1) / threads);
    max_packs = std::max(max_packs, c.packs);
    calls.push_back(c);
  }
  const size_t cap = static_cast<size_t>(N + 16) * (max_packs + 16) * 16;
  std::vector<std::vector<char>> sig(N, std::vector<char>(sizeof(Signal) + cap, 0));
  RankSignals sg{};
  for (int r = 0; r < N; r++) {
    sg.signals[r] = reinterpret_cast<Signal*>(sig[r].data());
    allocations[reinterpret_cast<uintptr_t>(sig[r].data())] = sig[r].size();
  }
  // out[r][c]: rank r's output of call c, pre-filled with a value no sum has.
  std::vector<std::vector<std::vector<T>>> in(N), out(N);
  for (int r = 0; r < N; r++) {
    for (int c = 0; c < ncalls; c++) {
      in[r].emplace_back(calls[c].packs * d);
      out[r].emplace_back(calls[c].packs * d, from_float<T>(-1.0f));
      for (int e = 0; e < calls[c].packs * d; e++) in[r][c][e] = from_float<T>(input(c, r, e));
    }
  }
  std::vector<std::thread> streams;
  for (int r = 0; r < N; r++) {
    streams.emplace_back([&, r]() {
      for (int c = 0; c < ncalls; c++) {
        const Call call = calls[c];
        std::vector<std::unique_ptr<pthread_barrier_t>> barriers;
        std::vector<std::thread> kernel;
        for (int b = 0; b < call.blocks; b++) {
          barriers.emplace_back(new pthread_barrier_t);
          pthread_barrier_init(barriers.back().get(), nullptr, threads);
          pthread_barrier_t* bar = barriers.back().get();
          for (int t = 0; t < threads; t++) {
            kernel.emplace_back([&, b, t, bar, call]() {
              threadIdx = dim3(t);
              blockIdx = dim3(b);
              blockDim = dim3(threads);
              gridDim = dim3(call.blocks);
              block_barrier = bar;
              const T* src = in[r][c].data();
              T* dst = out[r][c].data();
              Signal* self = sg.signals[r];
              if (call.algo == 0) {
                sglang::pcie_push_1shot<T, N>(src, dst, sg, self, r, call.packs);
              } else if (call.algo == 1) {
                sglang::pcie_push_2shot<T, N>(src, dst, sg, self, r, call.packs);
              } else {
                sglang::pcie_push_island<T, N>(src, dst, sg, self, r, call.packs, islands);
              }
            });
          }
        }
        for (auto& k : kernel) k.join();
        for (auto& b : barriers) pthread_barrier_destroy(b.get());
      }
    });
  }
  for (auto& s : streams) s.join();
  for (int c = 0; c < ncalls; c++) {
    for (int r = 0; r < N; r++) {
      for (int e = 0; e < calls[c].packs * d; e++) {
        float want = 0;
        for (int s = 0; s < N; s++) want += input(c, s, e);
        const float got = to_float(out[r][c][e]), first = to_float(out[0][c][e]);
        if (got != want || std::memcmp(&out[r][c][e], &out[0][c][e], sizeof(T)) != 0) {
          std::printf(
              "{\"ok\":false,\"call\":%d,\"algo\":\"%s\",\"packs\":%d,\"blocks\":%d,\"rank\":%d,\"index\":%d,"
              "\"got\":%g,\"want\":%g,\"rank0\":%g}\n",
              c, names[calls[c].algo], calls[c].packs, calls[c].blocks, r, e, got, want, first);
          return 0;
        }
      }
    }
  }
  std::printf("{\"ok\":true,\"calls\":%d}\n", ncalls);
  return 0;
}

template <typename T>
static int reduce_ws(int ws, const char* algo, const sglang::PcieIslands& is, int threads, unsigned seed, int calls) {
#ifdef KERNELSIM_NARROW
  if (std::is_same_v<T, float> && ws == 8) return reduce<T, 8>(algo, is, threads, seed, calls);
  std::printf("{\"error\":\"this driver is built for float32 at world size 8 only (KERNELSIM_NARROW)\"}\n");
  return 2;
#endif
  switch (ws) {
    case 2:
      return reduce<T, 2>(algo, is, threads, seed, calls);
    case 4:
      return reduce<T, 4>(algo, is, threads, seed, calls);
    case 6:
      return reduce<T, 6>(algo, is, threads, seed, calls);
    case 8:
      return reduce<T, 8>(algo, is, threads, seed, calls);
  }
  std::printf("{\"error\":\"world size %d: want 2, 4, 6 or 8\"}\n", ws);
  return 2;
}

#endif  // KERNELSIM_PARSE_ONLY

static void on_alarm(int) {
  const char msg[] = "{\"ok\":false,\"error\":\"hang: the emulated ranks did not finish\"}\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(3);
}

int main(int argc, char** argv) {
  std::signal(SIGALRM, on_alarm);
  alarm(120);
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "parse" && argc >= 4) {
    std::vector<size_t> sizes;
    for (int i = 4; i < argc; i++) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
    return parse(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10), sizes);
  }
#ifndef KERNELSIM_PARSE_ONLY
  if (cmd == "reduce" && argc >= 9 && argc <= 11) {
    if (argc >= 10 && std::string(argv[9]) != "-") {
      for (const char* p = argv[9]; *p;) {
        char* end;
        packs_given.push_back(static_cast<int>(std::strtol(p, &end, 10)));
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) break;
      }
    }
    if (argc == 11) alarm(static_cast<unsigned>(std::atoi(argv[10])));
    const int ws = std::atoi(argv[3]);
    const std::string islands = argv[5];
    if (islands == "-") {
      unsetenv("SGLANG_PCIE_CUSTOM_AR_ISLANDS");
    } else {
      setenv("SGLANG_PCIE_CUSTOM_AR_ISLANDS", islands.c_str(), 1);
    }
    sglang::PcieIslands is;
    try {
      is = CustomAllreduce::pcie_parse_islands(ws);
    } catch (const std::exception& e) {
      std::printf("{\"error\":%s}\n", quote(e.what()).c_str());
      return 2;
    }
    const int threads = std::atoi(argv[6]);
    const unsigned seed = static_cast<unsigned>(std::strtoul(argv[7], nullptr, 10));
    const int calls = std::atoi(argv[8]);
    const std::string dtype = argv[2];
    if (dtype == "float32") return reduce_ws<float>(ws, argv[4], is, threads, seed, calls);
#ifndef KERNELSIM_NARROW
    if (dtype == "float16") return reduce_ws<half>(ws, argv[4], is, threads, seed, calls);
    if (dtype == "bfloat16") return reduce_ws<nv_bfloat16>(ws, argv[4], is, threads, seed, calls);
#endif
  }
#endif  // KERNELSIM_PARSE_ONLY
  std::fprintf(stderr, "usage: driver parse WS CAP [BYTES...] | driver reduce DTYPE WS ALGO ISLANDS THREADS SEED CALLS [PACKS [SECONDS]]\n");
  return 2;
}
