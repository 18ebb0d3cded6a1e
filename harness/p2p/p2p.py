"""arpatch P2P probe: one process per GPU, started by
`python -m torch.distributed.run --standalone --nproc-per-node N p2p.py ...`
from `arpatch bench p2p` (harness/p2p).

It measures what custom allreduce relies on, the way custom allreduce
reaches its peers: buffers from cuMemAlloc shared with cuIpcGetMemHandle
and mapped with cuIpcOpenMemHandle (what cudaIpc* calls underneath), read
and written by kernels of its own (compiled at run time with NVRTC, run
through the CUDA driver API) with plain loads and stores through the
mapped pointers, as the custom allreduce kernels do. torch is used only
for torch.distributed (gloo) to pass the handles and results around.

Every byte that moves is checked. Data is a pattern of 32-bit words that
depends on a seed and on the word's index (pattern()), with a seed per
source, destination, repetition and slot, so a stale, misplaced or
changed word never matches:
  read     the kernel loads the peer's words and compares each with the
           pattern as it goes (no copy is kept to check later);
  write    the kernel stores the pattern into the peer's buffer, into a
           slot per timed launch; the peer checks every slot afterwards;
  latency  a ping-pong of flags (posted writes both ways) and a chain of
           dependent loads whose last index is checked.
Before measuring, each rank checks its checker: the kernel pattern against
this file's pattern() (words copied to the host), and a planted wrong
word that check() must find.

Tests, in order: the GPU's link to pinned host memory (loads and stores,
one stream, each GPU alone); per ordered GPU pair, alone: read and write
bandwidth at each size, flag round trip, dependent-read latency; then the
all-to-all patterns of the kernels (--patterns: groups of ranks that read,
then write, then make dependent loads, all at once). Rank 0 appends one JSON object per line to
--out: "env", a "start" before each case (a hang names its case), its
"result", and "done".

--stub-world-size N runs N ranks as threads of one process on a stub
device of host memory, with no torch and no GPU: arpatch's tests run the
real orchestration and checks that way, with a transfer that corrupts
bytes (--stub-corrupt) or a slow link (--stub-rate).
"""
import argparse
import ctypes
import glob
import json
import math
import os
import sys
import threading
import time

MASK = 0xFFFFFFFF
MAXP = 32  # peers per kernel launch (struct Peers)
HOST = -1  # the peer of a transfer to or from pinned host memory


def pattern(seed, i):
    """The 32-bit word at word index i of the data with this seed; the
    kernels' pat() computes the same."""
    x = (seed ^ (i & MASK) ^ (((i >> 32) * 0x9E3779B9) & MASK)) & MASK
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK
    x ^= x >> 16
    return x


def seed_of(*parts):
    """A seed for one transfer, from the names and numbers that identify
    it (test, source, destination, repetition, slot)."""
    h = 0x811C9DC5
    for p in parts:
        for b in str(p).encode() + b"/":
            h = ((h ^ b) * 0x01000193) & MASK
    return h


KERNELS = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
#define MAXP %(maxp)d

struct Peers { u64 ptr[MAXP]; u32 seed[MAXP]; };

__device__ __forceinline__ u32 pat(u32 seed, u64 i) {
  u32 x = seed ^ (u32)i ^ ((u32)(i >> 32) * 0x9E3779B9u);
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}
__device__ __forceinline__ u64 now_ns() {
  u64 t; asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(t)); return t;
}
__device__ __forceinline__ void load4(const u32* p, u32& a, u32& b, u32& c, u32& d) {
  asm volatile("ld.global.cv.v4.u32 {%%0,%%1,%%2,%%3}, [%%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
}
__device__ __forceinline__ void store4(u32* p, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.v4.u32 [%%0], {%%1,%%2,%%3,%%4};" :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// One word against the pattern: a mismatch keeps the lowest index with
// what it held (index << 32 | word) in bad[1].
__device__ __forceinline__ u64 cmp1(u64* bad, u64 i, u32 got, u32 seed) {
  if (got == pat(seed, i)) return 0;
  atomicMin(bad + 1, (i << 32) | (u64)got);
  return 1;
}
__device__ __forceinline__ u64 cmp4(u64* bad, const u32* p, u64 i, u32 seed) {
  u32 a, b, c, d;
  load4(p + i, a, b, c, d);
  return cmp1(bad, i, a, seed) + cmp1(bad, i + 1, b, seed) + cmp1(bad, i + 2, c, seed) + cmp1(bad, i + 3, d, seed);
}

extern "C" __global__ void fill(u32* p, u64 nwords, u32 seed) {
  for (u64 i = 4 * (blockIdx.x * (u64)blockDim.x + threadIdx.x); i < nwords; i += 4 * (u64)gridDim.x * blockDim.x)
    store4(p + i, pat(seed, i), pat(seed, i + 1), pat(seed, i + 2), pat(seed, i + 3));
}

// bad[0] counts mismatched words, bad[1] keeps the first (see cmp1).
extern "C" __global__ void check(const u32* p, u64 nwords, u32 seed, u64* bad) {
  u64 n = 0;
  for (u64 i = 4 * (blockIdx.x * (u64)blockDim.x + threadIdx.x); i < nwords; i += 4 * (u64)gridDim.x * blockDim.x)
    n += cmp4(bad, p, i, seed);
  if (n) atomicAdd(bad, n);
}

// Reads nwords from each of gridDim.y peers (blockIdx.y picks one) through
// the mapped pointer, checking every word; bad[2k], bad[2k+1] for peer k.
extern "C" __global__ void read_check(Peers q, u64 nwords, u64* bad) {
  const u32* p = (const u32*)q.ptr[blockIdx.y];
  u32 seed = q.seed[blockIdx.y];
  u64* b = bad + 2 * blockIdx.y;
  u64 n = 0;
  for (u64 i = 4 * (blockIdx.x * (u64)blockDim.x + threadIdx.x); i < nwords; i += 4 * (u64)gridDim.x * blockDim.x)
    n += cmp4(b, p, i, seed);
  if (n) atomicAdd(b, n);
}

// Stores the pattern into each of gridDim.y peers' buffers.
extern "C" __global__ void write_pattern(Peers q, u64 nwords) {
  u32* p = (u32*)q.ptr[blockIdx.y];
  u32 seed = q.seed[blockIdx.y];
  for (u64 i = 4 * (blockIdx.x * (u64)blockDim.x + threadIdx.x); i < nwords; i += 4 * (u64)gridDim.x * blockDim.x)
    store4(p + i, pat(seed, i), pat(seed, i + 1), pat(seed, i + 2), pat(seed, i + 3));
}

// A ring of nslots slots 64 words apart; slot s holds the word index of
// slot (s + step) %% nslots.
extern "C" __global__ void make_ring(u32* p, u32 nslots, u32 step) {
  for (u32 s = blockIdx.x * blockDim.x + threadIdx.x; s < nslots; s += gridDim.x * blockDim.x)
    p[64 * (u64)s] = 64 * ((s + step) %% nslots);
}

// Dependent loads around the ring: warm hops, then hops timed; out[0] the
// ns of the timed hops, out[1] the index reached.
extern "C" __global__ void chase(const u32* ring, int warm, int hops, u64* out) {
  u32 idx = 0;
  for (int k = 0; k < warm; k++) idx = *(const volatile u32*)(ring + idx);
  u64 t0 = now_ns();
  for (int k = 0; k < hops; k++) idx = *(const volatile u32*)(ring + idx);
  out[0] = now_ns() - t0;
  out[1] = idx;
}

// The same from each of gridDim.x peers' rings at once (blockIdx.x picks
// one): dependent loads under all-to-all load; out[2k], out[2k+1] for peer k.
extern "C" __global__ void chase_many(Peers q, int warm, int hops, u64* out) {
  const u32* ring = (const u32*)q.ptr[blockIdx.x];
  u32 idx = 0;
  for (int k = 0; k < warm; k++) idx = *(const volatile u32*)(ring + idx);
  u64 t0 = now_ns();
  for (int k = 0; k < hops; k++) idx = *(const volatile u32*)(ring + idx);
  out[2 * blockIdx.x] = now_ns() - t0;
  out[2 * blockIdx.x + 1] = idx;
}

// Waits until *flag reaches v (wrapping compare); 1 once timeout_ns passed.
__device__ __forceinline__ int wait_flag(const volatile u32* flag, u32 v, u64 t0, u64 timeout_ns) {
  for (u32 spin = 0; (int)(*flag - v) < 0; spin++)
    if ((spin & 1023) == 1023 && now_ns() - t0 > timeout_ns) return 1;
  return 0;
}

// Ping-pong of flags between two GPUs: the leader stores base+k into the
// peer's flag and waits for its own to reach it; the follower answers.
// out[0]: ns of the timed round trips (after warm); out[1]: 1 on timeout.
extern "C" __global__ void pingpong(volatile u32* peer_flag, volatile u32* my_flag, u32 base, int warm, int iters,
                                    int leader, u64 timeout_ns, u64* out) {
  u64 start = now_ns(), t0 = start;
  for (int k = 1; k <= warm + iters; k++) {
    if (k == warm + 1) t0 = now_ns();
    u32 v = base + k;
    if (leader) *peer_flag = v;
    if (wait_flag(my_flag, v, start, timeout_ns)) { out[1] = 1; return; }
    if (!leader) *peer_flag = v;
  }
  out[0] = now_ns() - t0;
  out[1] = 0;
}

// Start together: store epoch into each of n peers' flags (q.ptr), then
// wait for my flags q.seed[k] (a rank number) to reach it. out[0]: 1 on
// timeout.
extern "C" __global__ void barrier(Peers q, int n, volatile u32* mine, u32 epoch, u64 timeout_ns, u64* out) {
  u64 t0 = now_ns();
  __threadfence_system();
  for (int k = 0; k < n; k++) *(volatile u32*)q.ptr[k] = epoch;
  for (int k = 0; k < n; k++)
    if (wait_flag(mine + q.seed[k], epoch, t0, timeout_ns)) { out[0] = 1; return; }
  out[0] = 0;
}
""" % {"maxp": MAXP}


class Peers(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_uint64 * MAXP), ("seed", ctypes.c_uint32 * MAXP)]


def peers(ptrs, seeds):
    if len(ptrs) > MAXP:
        raise ValueError("%d peers in one launch; at most %d" % (len(ptrs), MAXP))
    q = Peers()
    for k, (p, s) in enumerate(zip(ptrs, seeds)):
        q.ptr[k], q.seed[k] = p, s
    return q


# ------------------------------------------------------------- the GPU

class CudaError(RuntimeError):
    pass


def _load_lib(names, what):
    import importlib.util
    dirs = []
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        dirs.append(os.path.join(os.path.dirname(spec.origin), "lib"))
    for sp in sys.path:
        dirs += glob.glob(os.path.join(sp, "nvidia", "*", "lib"))
    dirs.append(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64"))
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            pass
        for d in dirs:
            for p in sorted(glob.glob(os.path.join(d, n + "*"))):
                # NVRTC loads its builtins by name: from a wheel's directory
                # that only works once they are loaded.
                for b in sorted(glob.glob(os.path.join(d, "libnvrtc-builtins.so*"))):
                    try:
                        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                    except OSError:
                        pass
                try:
                    return ctypes.CDLL(p)
                except OSError:
                    pass
    raise RuntimeError("%s not found (looked for %s in torch/lib, nvidia/*/lib, $CUDA_HOME/lib64)" % (what, ", ".join(names)))


class Cuda:
    """One GPU through the CUDA driver API (libcuda, the driver's own) on
    its primary context, the one the CUDA runtime and torch use, with the
    kernels above compiled by NVRTC for its compute capability."""

    def __init__(self, ordinal):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet(%d)" % ordinal)
        self.dev = dev.value
        ctx = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.dev), "cuDevicePrimaryCtxRetain")
        self._check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        name = ctypes.create_string_buffer(256)
        self._check(self.lib.cuDeviceGetName(name, 256, self.dev), "cuDeviceGetName")
        bus = ctypes.create_string_buffer(64)
        self._check(self.lib.cuDeviceGetPCIBusId(bus, 64, self.dev), "cuDeviceGetPCIBusId")
        self.name, self.bus_id = name.value.decode(), bus.value.decode().lower()
        self.major, self.minor = self._attr(75), self._attr(76)  # COMPUTE_CAPABILITY_MAJOR, _MINOR
        self.sms = self._attr(16)  # MULTIPROCESSOR_COUNT
        ver = ctypes.c_int()
        self._check(self.lib.cuDriverGetVersion(ctypes.byref(ver)), "cuDriverGetVersion")
        self.driver = ver.value
        self.stream = ctypes.c_void_p()
        self._check(self.lib.cuStreamCreate(ctypes.byref(self.stream), 1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING
        self.ptx_arch, self.nvrtc = self._compile()
        self.fn = {}
        for k in ("fill", "check", "read_check", "write_pattern", "make_ring", "chase", "chase_many", "pingpong", "barrier"):
            f = ctypes.c_void_p()
            self._check(self.lib.cuModuleGetFunction(ctypes.byref(f), self.module, k.encode()), "cuModuleGetFunction(%s)" % k)
            self.fn[k] = f
        self.lib.cuIpcOpenMemHandle = getattr(self.lib, "cuIpcOpenMemHandle_v2", self.lib.cuIpcOpenMemHandle)
        self.scratch = self.alloc(16 * MAXP)  # bad counters, kernel outputs

    def describe(self):
        return {"device": self.name, "bus_id": self.bus_id, "compute_cap": "%d.%d" % (self.major, self.minor),
                "sms": self.sms, "driver_api": self.driver, "nvrtc": self.nvrtc, "ptx_arch": self.ptx_arch}

    def _attr(self, a):
        v = ctypes.c_int()
        self._check(self.lib.cuDeviceGetAttribute(ctypes.byref(v), a, self.dev), "cuDeviceGetAttribute(%d)" % a)
        return v.value

    def _check(self, err, what):
        if err != 0:
            s = ctypes.c_char_p()
            self.lib.cuGetErrorString(err, ctypes.byref(s))
            raise CudaError("%s: CUDA error %d: %s" % (what, err, (s.value or b"?").decode()))

    def _compile(self):
        nv = _load_lib(["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"], "NVRTC")
        major, minor = ctypes.c_int(), ctypes.c_int()
        nv.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        want = self.major * 10 + self.minor
        arch = want
        n = ctypes.c_int()
        if hasattr(nv, "nvrtcGetNumSupportedArchs") and nv.nvrtcGetNumSupportedArchs(ctypes.byref(n)) == 0 and n.value > 0:
            archs = (ctypes.c_int * n.value)()
            nv.nvrtcGetSupportedArchs(archs)
            ok = [a for a in archs if a <= want]
            if not ok:
                raise RuntimeError("NVRTC %d.%d compiles for none of compute_%d and below" % (major.value, minor.value, want))
            arch = max(ok)  # older NVRTC: the driver JITs its PTX forward
        prog = ctypes.c_void_p()
        src = KERNELS.encode()
        if nv.nvrtcCreateProgram(ctypes.byref(prog), src, b"p2p.cu", 0, None, None) != 0:
            raise RuntimeError("nvrtcCreateProgram failed")
        opts = (ctypes.c_char_p * 1)(("--gpu-architecture=compute_%d" % arch).encode())
        rc = nv.nvrtcCompileProgram(prog, 1, opts)
        if rc != 0:
            size = ctypes.c_size_t()
            nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nv.nvrtcGetProgramLog(prog, log)
            raise RuntimeError("NVRTC could not compile the probe's kernels (compute_%d): %s" % (arch, log.value.decode(errors="replace")))
        size = ctypes.c_size_t()
        nv.nvrtcGetPTXSize(prog, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        nv.nvrtcGetPTX(prog, ptx)
        nv.nvrtcDestroyProgram(ctypes.byref(prog))
        self.module = ctypes.c_void_p()
        self._check(self.lib.cuModuleLoadData(ctypes.byref(self.module), ptx), "cuModuleLoadData (compute_%d PTX)" % arch)
        return "compute_%d" % arch, "%d.%d" % (major.value, minor.value)

    # memory
    def alloc(self, n):
        p = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), "cuMemAlloc(%d)" % n)
        self._check(self.lib.cuMemsetD8_v2(p, 0, ctypes.c_size_t(n)), "cuMemsetD8")
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")  # the memset ran on the legacy stream
        return p.value

    def host_alloc(self, n):
        """Pinned host memory mapped into the GPU: (host address, device address)."""
        h = ctypes.c_void_p()
        self._check(self.lib.cuMemHostAlloc(ctypes.byref(h), ctypes.c_size_t(n), 1 | 2), "cuMemHostAlloc(%d)" % n)  # PORTABLE | DEVICEMAP
        d = ctypes.c_uint64()
        self._check(self.lib.cuMemHostGetDevicePointer_v2(ctypes.byref(d), h, 0), "cuMemHostGetDevicePointer")
        return h.value, d.value

    def host_free(self, h):
        self._check(self.lib.cuMemFreeHost(ctypes.c_void_p(h)), "cuMemFreeHost")

    def ipc_handle(self, ptr):
        h = (ctypes.c_ubyte * 64)()  # CUipcMemHandle; c_ubyte, not c_char, so no byte is cut at a NUL
        self._check(self.lib.cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(ptr)), "cuIpcGetMemHandle")
        return bytes(h)

    def ipc_open(self, handle):
        class H(ctypes.Structure):
            _fields_ = [("reserved", ctypes.c_ubyte * 64)]
        p = ctypes.c_uint64()
        self._check(self.lib.cuIpcOpenMemHandle(ctypes.byref(p), H.from_buffer_copy(handle), 1), "cuIpcOpenMemHandle")  # LAZY_ENABLE_PEER_ACCESS
        return p.value

    def ipc_close(self, ptr):
        self._check(self.lib.cuIpcCloseMemHandle(ctypes.c_uint64(ptr)), "cuIpcCloseMemHandle")

    def download(self, ptr, n):
        self.sync()
        buf = ctypes.create_string_buffer(n)
        self._check(self.lib.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr), ctypes.c_size_t(n)), "cuMemcpyDtoH")
        return buf.raw

    def upload(self, ptr, data):
        self.sync()
        self._check(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), data, ctypes.c_size_t(len(data))), "cuMemcpyHtoD")

    def sync(self):
        self._check(self.lib.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    # kernels
    def _launch(self, name, grid, block, *args):
        vals = []
        for a in args:
            vals.append(a if isinstance(a, (ctypes._SimpleCData, ctypes.Structure)) else ctypes.c_uint64(a))
        params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        gx, gy = grid
        self._check(self.lib.cuLaunchKernel(self.fn[name], gx, gy, 1, block, 1, 1, 0, self.stream, params, None), "launch " + name)

    def _grid(self, nwords):
        return max(1, min(self.sms * 4, (nwords // 4 + 511) // 512))

    def fill(self, ptr, nbytes, seed):
        n = nbytes // 4
        self._launch("fill", (self._grid(n), 1), 512, ptr, ctypes.c_uint64(n), ctypes.c_uint32(seed))

    def zero_bad(self, k):
        self.upload(self.scratch, (b"\x00" * 8 + b"\xff" * 8) * k)

    def bad(self, k):
        raw = self.download(self.scratch, 16 * k)
        out = []
        for j in range(k):
            n = int.from_bytes(raw[16 * j:16 * j + 8], "little")
            first = int.from_bytes(raw[16 * j + 8:16 * j + 16], "little")
            out.append((n, first >> 32, first & MASK) if n else (0, None, None))
        return out

    def check(self, ptr, nbytes, seed):
        """Enqueue a check of nbytes at ptr against seed, into bad slot 0."""
        n = nbytes // 4
        self._launch("check", (self._grid(n), 1), 512, ptr, ctypes.c_uint64(n), ctypes.c_uint32(seed), self.scratch)

    def read_check(self, ptrs, seeds, nbytes):
        n = nbytes // 4
        self._launch("read_check", (self._grid(n), len(ptrs)), 512, peers(ptrs, seeds), ctypes.c_uint64(n), self.scratch)

    def write(self, ptrs, seeds, nbytes):
        n = nbytes // 4
        self._launch("write_pattern", (self._grid(n), len(ptrs)), 512, peers(ptrs, seeds), ctypes.c_uint64(n))

    def make_ring(self, ptr, nslots, step):
        self._launch("make_ring", (max(1, min(64, nslots // 256)), 1), 256, ptr, ctypes.c_uint32(nslots), ctypes.c_uint32(step))

    def chase(self, ptr, warm, hops):
        self._launch("chase", (1, 1), 1, ptr, ctypes.c_int(warm), ctypes.c_int(hops), self.scratch)
        raw = self.download(self.scratch, 16)
        return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little")

    def chase_many(self, rings, warm, hops):
        """Dependent loads around each ring at once: [(ns, index reached)]."""
        self._launch("chase_many", (len(rings), 1), 1, peers(rings, [0] * len(rings)), ctypes.c_int(warm), ctypes.c_int(hops), self.scratch)
        raw = self.download(self.scratch, 16 * len(rings))
        return [(int.from_bytes(raw[16 * k:16 * k + 8], "little"), int.from_bytes(raw[16 * k + 8:16 * k + 16], "little")) for k in range(len(rings))]

    def pingpong(self, peer_flag, my_flag, base, warm, iters, leader, timeout_ns):
        self.upload(self.scratch, b"\x00" * 16)
        self._launch("pingpong", (1, 1), 1, peer_flag, my_flag, ctypes.c_uint32(base), ctypes.c_int(warm), ctypes.c_int(iters),
                     ctypes.c_int(leader), ctypes.c_uint64(timeout_ns), self.scratch)
        raw = self.download(self.scratch, 16)
        return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little")

    def barrier(self, signals, waits, my_flags, epoch, timeout_ns, out):
        """Enqueue the start barrier; its status goes to out (8 bytes)."""
        self._launch("barrier", (1, 1), 1, peers(signals, waits), ctypes.c_int(len(signals)), my_flags,
                     ctypes.c_uint32(epoch), ctypes.c_uint64(timeout_ns), out)

    def timed(self, reps, inner, body):
        """Milliseconds per rep of inner calls of body(rep, k), by CUDA events."""
        e0, e1 = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.lib.cuEventCreate(ctypes.byref(e0), 0), "cuEventCreate")
        self._check(self.lib.cuEventCreate(ctypes.byref(e1), 0), "cuEventCreate")
        out = []
        try:
            for r in range(reps):
                self._check(self.lib.cuEventRecord(e0, self.stream), "cuEventRecord")
                for k in range(inner):
                    body(r, k)
                self._check(self.lib.cuEventRecord(e1, self.stream), "cuEventRecord")
                self._check(self.lib.cuEventSynchronize(e1), "cuEventSynchronize")
                ms = ctypes.c_float()
                self._check(self.lib.cuEventElapsedTime(ctypes.byref(ms), e0, e1), "cuEventElapsedTime")
                out.append(ms.value)
        finally:
            self.lib.cuEventDestroy_v2(e0)
            self.lib.cuEventDestroy_v2(e1)
        return out

    def read_words(self, ptr, nwords):
        raw = self.download(ptr, 4 * nwords)
        return [int.from_bytes(raw[4 * k:4 * k + 4], "little") for k in range(nwords)]

    def write_word(self, ptr, value):
        self.upload(ptr, value.to_bytes(4, "little"))


# ------------------------------------------------------------ the stub

class StubWorld:
    """Memory of a stub host: every allocation of every rank (and pinned
    host memory), by address, in pages made when first written (zeros
    before), so a large buffer costs what is written of it.

    Its faults and rates come from the command line:
      --stub-corrupt OP:RANK:PEER   OP "read": RANK's loads from PEER's memory
                                    return word 7 with a bit flipped; "write":
                                    its stores leave word 7 so in PEER's memory;
                                    "flag": its flags never reach PEER (a
                                    timeout); "ipc": it cannot map PEER's memory.
                                    PEER is a rank or "host".
      --stub-rate OP:RANK:PEER:V    "read"/"write" in GB/s (default 40),
                                    "read_latency"/"flag_rtt" in µs (1.5, 2),
                                    "loaded_read_latency" (a pattern's) in µs (4);
                                    RANK and PEER may be "*".
      --stub-max-bytes N            a transfer moves and checks its first N
                                    bytes only (64), its time counting them all.
    """

    PAGE = 4096

    def __init__(self, corrupt, rates, max_bytes):
        self.lock = threading.Lock()
        self.maps = {}  # address -> (allocation base, size, owner rank or HOST)
        self.pages = {}  # (allocation base, page) -> bytearray
        self.starts = {}  # address // PAGE -> the mapping's address (find's cache)
        self.next = 1 << 40
        self.corrupt, self.rates, self.max_bytes = corrupt, rates, max_bytes

    def _place(self, base, n, owner):
        with self.lock:
            a = self.next
            self.next += ((n + self.PAGE - 1) // self.PAGE + 16) * self.PAGE
            self.maps[a] = (base if base is not None else a, n, owner)
            return a

    def new(self, n, owner):
        return self._place(None, n, owner)

    def alias(self, addr):
        """Another address for the same memory: what an IPC mapping gives."""
        base, n, owner = self.maps[addr]
        return self._place(base, n, owner)

    def find(self, addr, n):
        a = self.starts.get(addr // self.PAGE)
        if a is None:
            with self.lock:  # other ranks' threads add mappings
                a = next((m for m, (_, size, _) in self.maps.items() if m <= addr < m + max(1, size)), None)
        if a is None or addr + n > a + self.maps[a][1]:
            raise RuntimeError("stub: %d bytes at %#x are not mapped (an illegal address on a GPU)" % (n, addr))
        self.starts[addr // self.PAGE] = a
        with self.lock:
            base, _, owner = self.maps[a]
        return base, addr - a, owner

    def read(self, addr, n):
        base, off, _ = self.find(addr, n)
        out = bytearray()
        while n:
            pg, o = divmod(off, self.PAGE)
            k = min(n, self.PAGE - o)
            page = self.pages.get((base, pg))
            out += page[o:o + k] if page else bytes(k)
            off, n = off + k, n - k
        return bytes(out)

    def write(self, addr, data):
        base, off, _ = self.find(addr, len(data))
        data = memoryview(data)
        while len(data):
            pg, o = divmod(off, self.PAGE)
            k = min(len(data), self.PAGE - o)
            page = self.pages.setdefault((base, pg), bytearray(self.PAGE))
            page[o:o + k] = data[:k]
            off, data = off + k, data[k:]


_pattern_cache = {}


def patterned(seed, n):
    """The first n words of the pattern with seed (the stub's, cached)."""
    k = (seed, n)
    if k not in _pattern_cache:
        if len(_pattern_cache) > 4096:
            _pattern_cache.clear()
        _pattern_cache[k] = [pattern(seed, i) for i in range(n)]
    return _pattern_cache[k]


def words(data):
    return [int.from_bytes(data[4 * k:4 * k + 4], "little") for k in range(len(data) // 4)]


def pack(ws):
    return b"".join(w.to_bytes(4, "little") for w in ws)


class Stub:
    """The Cuda class's operations on a StubWorld, for one rank: the
    results a GPU gives (the pattern, the checks, the ring), with times
    from the stub's rates instead of a clock."""

    def __init__(self, world, rank, bus_id):
        self.w, self.rank, self.max_bytes = world, rank, world.max_bytes
        self.name, self.bus_id = "Stub GPU", bus_id
        self.scratch = world.new(16 * MAXP, rank)
        self.pending_ms = 0.0

    def describe(self):
        return {"device": self.name, "bus_id": self.bus_id, "compute_cap": "9.0", "sms": 132, "driver_api": 0,
                "nvrtc": "stub", "ptx_arch": "stub"}

    def alloc(self, n):
        return self.w.new(n, self.rank)

    def host_alloc(self, n):
        d = self.w.new(n, HOST)
        return d, d

    def host_free(self, h):
        pass

    def ipc_handle(self, ptr):
        return ptr.to_bytes(8, "little") + bytes(56)

    def ipc_open(self, handle):
        addr = int.from_bytes(handle[:8], "little")
        if ("ipc", self.rank, self.w.maps[addr][2]) in self.w.corrupt:
            raise CudaError("cuIpcOpenMemHandle: CUDA error 217: peer access is not supported between these two devices")
        return self.w.alias(addr)

    def ipc_close(self, ptr):
        pass

    def sync(self):
        pass

    def _owner(self, ptr):
        return self.w.find(ptr, 1)[2]

    def _spend(self, op, ptr, nbytes):
        owner = self._owner(ptr)
        rate = self.w.rates.get((op, self.rank, owner), self.w.rates.get((op, "*", "*"), 40.0))
        self.pending_ms += nbytes / (rate * 1e6)

    def fill(self, ptr, nbytes, seed):
        self.w.write(ptr, pack(patterned(seed, min(nbytes, self.max_bytes) // 4)))

    def zero_bad(self, k):
        self.w.write(self.scratch, (b"\x00" * 8 + b"\xff" * 8) * k)

    def bad(self, k):
        raw = self.w.read(self.scratch, 16 * k)
        out = []
        for j in range(k):
            n = int.from_bytes(raw[16 * j:16 * j + 8], "little")
            first = int.from_bytes(raw[16 * j + 8:16 * j + 16], "little")
            out.append((n, first >> 32, first & MASK) if n else (0, None, None))
        return out

    def _compare(self, slot, ptr, nbytes, seed, flip):
        got = words(self.w.read(ptr, min(nbytes, self.max_bytes)))
        if flip:
            got[7] ^= 1 << 5  # what a corrupting link returned
        want = patterned(seed, len(got))
        bad = [(k, g) for k, g in enumerate(got) if g != want[k]]
        if bad:
            o = self.scratch + 16 * slot
            raw = self.w.read(o, 16)
            n = int.from_bytes(raw[:8], "little") + len(bad)
            first = min(int.from_bytes(raw[8:], "little"), (bad[0][0] << 32) | bad[0][1])
            self.w.write(o, n.to_bytes(8, "little") + first.to_bytes(8, "little"))

    def check(self, ptr, nbytes, seed):
        self._compare(0, ptr, nbytes, seed, False)

    def read_check(self, ptrs, seeds, nbytes):
        for slot, (p, s) in enumerate(zip(ptrs, seeds)):
            self._spend("read", p, nbytes)
            self._compare(slot, p, nbytes, s, ("read", self.rank, self._owner(p)) in self.w.corrupt)

    def write(self, ptrs, seeds, nbytes):
        for p, s in zip(ptrs, seeds):
            self._spend("write", p, nbytes)
            self.fill(p, nbytes, s)
            if ("write", self.rank, self._owner(p)) in self.w.corrupt:
                w7 = words(self.w.read(p + 28, 4))[0]
                self.w.write(p + 28, pack([w7 ^ (1 << 5)]))  # word 7, as a corrupting link leaves it

    def make_ring(self, ptr, nslots, step):
        for s in range(nslots):
            self.w.write(ptr + 256 * s, pack([64 * ((s + step) % nslots)]))

    def chase(self, ptr, warm, hops, rate="read_latency"):
        idx = 0
        for _ in range(warm + hops):
            idx = words(self.w.read(ptr + 4 * idx, 4))[0]
        us = self.w.rates.get((rate, self.rank, self._owner(ptr)), self.w.rates.get((rate, "*", "*"), 1.5 if rate == "read_latency" else 4.0))
        return int(hops * 1000 * us), idx

    def chase_many(self, rings, warm, hops):
        return [self.chase(r, warm, hops, "loaded_read_latency") for r in rings]

    def pingpong(self, peer_flag, my_flag, base, warm, iters, leader, timeout_ns):
        if ("flag", self.rank, self._owner(peer_flag)) in self.w.corrupt:
            return 0, 1  # the peer never saw the flag: a timeout
        return int(iters * 1000 * self.w.rates.get(("flag_rtt", "*", "*"), 2.0)), 0

    def barrier(self, signals, waits, my_flags, epoch, timeout_ns, out):
        self.w.write(out, bytes(8))

    def timed(self, reps, inner, body):
        out = []
        for r in range(reps):
            self.pending_ms = 0.0
            for k in range(inner):
                body(r, k)
            out.append(self.pending_ms)
        return out

    def read_words(self, ptr, nwords):
        return words(self.w.read(ptr, 4 * nwords))

    def write_word(self, ptr, value):
        self.w.write(ptr, pack([value]))

    def download(self, ptr, n):
        return self.w.read(ptr, n)

    def upload(self, ptr, data):
        self.w.write(ptr, data)


# ------------------------------------------------------ ranks talking

class TorchComm:
    """torch.distributed over gloo: handles and results between ranks."""

    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        dist.init_process_group("gloo")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def barrier(self):
        self.dist.barrier()

    def gather(self, obj):
        out = [None] * self.size
        self.dist.all_gather_object(out, obj)
        return out

    def close(self):
        self.dist.destroy_process_group()


class ThreadComm:
    """The same between the threads of a stub run."""

    def __init__(self, shared, rank):
        self.s, self.rank, self.size = shared, rank, shared["size"]

    def barrier(self):
        self.s["barrier"].wait()

    def gather(self, obj):
        self.s["slots"][self.rank] = obj
        self.s["barrier"].wait()
        out = list(self.s["slots"])
        self.s["barrier"].wait()
        return out

    def close(self):
        pass


# ------------------------------------------------------------ measure

class Acc:
    """The checks of one direction (rank's kernel, peer's memory): bytes
    checked, words that did not match, the first of them."""

    def __init__(self, rank, peer):
        self.rank, self.peer, self.checked, self.bad, self.first = rank, peer, 0, 0, None

    def add(self, nbytes, bad):
        self.checked += nbytes
        n, idx, got = bad
        if n:
            self.bad += n
            if self.first is None or idx < self.first[0]:
                self.first = (idx, got)

    def rec(self):
        r = {"rank": self.rank, "peer": self.peer, "checked_bytes": self.checked, "bad_words": self.bad}
        if self.first:
            r["first_bad"] = {"index": self.first[0], "got": "%#010x" % self.first[1]}
        return r


def errtext(e):
    return "%s: %s" % (type(e).__name__, e)


class Probe:
    """One rank's part in every test. Every method is called by every rank
    with the same arguments (SPMD); ranks a test does not use take part in
    its barriers and gathers only. A result goes out once, from rank 0,
    with what the ranks that took part gathered."""

    def __init__(self, dev, comm, args, emit):
        self.dev, self.comm, self.a, self.emit = dev, comm, args, emit
        self.me, self.n = comm.rank, comm.size
        self.sizes = [int(s) for s in args.sizes.split(",") if s]
        self.timeout_ns = int(args.device_timeout * 1e9)
        self.epoch = 0
        self.ring_slots = 4096
        self.data_bytes = max(self.sizes + [args.pattern_bytes])
        self.recv_bytes = max([self.slots(s) * s for s in self.sizes] + [self.n * args.pattern_bytes])
        # One allocation, one IPC handle: data | recv | flags | ring. Flag
        # word k (barriers) and 64+k (ping-pong) are written by rank k only.
        self.off_recv = self.data_bytes
        self.off_flags = self.off_recv + self.recv_bytes
        self.off_ring = self.off_flags + 4 * 256
        self.base = dev.alloc(self.off_ring + 256 * self.ring_slots)
        self.out8 = dev.alloc(64)
        self.peer_base = {}
        self.unmapped = {}  # (rank, peer) -> why rank could not map peer's memory

    def slots(self, size):
        """Timed launches per rep at size: enough that a rep moves at least
        --min-rep-bytes (launch costs vanish), at most 64; each write
        launch goes into a slot of its own, so every byte written is
        checked."""
        return max(1, min(64, -(-self.a.min_rep_bytes // size)))

    def start(self, key):
        if self.me == 0:
            self.emit(dict(key, event="start", t=time.time()))

    def result(self, rec):
        if self.me == 0:
            self.emit(dict(rec, event="result"))

    def skip(self, key, pairs):
        """A result that says why the test did not run: a mapping that
        failed (the same on every rank, from setup)."""
        why = ["GPU rank %d could not map rank %d's memory (%s)" % (a, b, self.unmapped[(a, b)]) for a, b in pairs if (a, b) in self.unmapped]
        if not why:
            return False
        self.start(key)
        self.result(dict(key, error="not run: " + "; ".join(why)))
        return True

    # -- set-up
    def self_check(self):
        """The checker must see a wrong word, and the kernels' pattern must
        be pattern(): else no check here could be trusted."""
        d, p = self.dev, self.base
        n = min(1 << 16, getattr(d, "max_bytes", 1 << 16))  # a stub moves its first max_bytes
        at = n // 8 + 3
        seed = seed_of("self-check", self.me)
        d.fill(p, n, seed)
        got = d.read_words(p, min(64, n // 4))
        if got != [pattern(seed, k) for k in range(len(got))]:
            return "the kernels' pattern differs from p2p.py's pattern(): %s" % got[:4]
        d.write_word(p + 4 * at, pattern(seed, at) ^ 1)
        d.zero_bad(1)
        d.check(p, n, seed)
        bad = d.bad(1)[0]
        if bad != (1, at, pattern(seed, at) ^ 1):
            return "check() did not find the one wrong word planted at index %d: %s" % (at, bad)
        return ""

    def setup(self):
        """Reports every rank and maps every peer's memory; False when a
        rank's self-check failed (nothing is measured then)."""
        try:
            info = dict(self.dev.describe(), self_check=self.self_check())
        except Exception as e:
            info = {"self_check": errtext(e)}
        info = self.comm.gather(info)
        if self.me == 0:
            self.emit({"event": "env", "world_size": self.n, "ranks": info, "sizes": self.sizes,
                       "pattern_bytes": self.a.pattern_bytes, "reps": self.a.reps})
        if any(i["self_check"] for i in info):
            return False
        self.dev.fill(self.base, self.data_bytes, seed_of("data", self.me))
        self.dev.make_ring(self.base + self.off_ring, self.ring_slots, 97)
        self.dev.sync()
        if self.n > 1:
            handles = self.comm.gather(self.dev.ipc_handle(self.base))
            mine = {}
            for r, h in enumerate(handles):
                if r != self.me:
                    try:
                        self.peer_base[r] = self.dev.ipc_open(h)
                    except Exception as e:
                        mine[r] = errtext(e)
            for r, errs in enumerate(self.comm.gather(mine)):
                for peer, msg in sorted(errs.items()):
                    self.unmapped[(r, peer)] = msg
                    key = {"test": "ipc", "rank": r, "peer": peer}
                    self.start(key)
                    self.result(dict(key, error=msg))
        self.comm.barrier()
        return True

    @staticmethod
    def rates(ms_per_launch, nbytes):
        return [nbytes / (m * 1e6) if m > 0 else 0.0 for m in ms_per_launch]

    def one(self, key, who, body):
        """A test only rank who runs: its result, or its error."""
        self.start(key)
        rec = dict(key)
        if self.me == who:
            try:
                rec.update(body())
            except Exception as e:
                rec["error"] = errtext(e)
        self.result(self.comm.gather(rec)[who])

    # -- the GPU's link to pinned host memory, each GPU alone
    def host(self, gpu, size):
        inner = self.slots(size)
        self.one({"test": "host", "op": "load", "rank": gpu, "bytes": size}, gpu, lambda: self._host_load(size, inner))
        self.one({"test": "host", "op": "store", "rank": gpu, "bytes": size}, gpu, lambda: self._host_store(size, inner))

    def _host_load(self, size, inner):
        d = self.dev
        h, p = d.host_alloc(size)
        try:
            seed = seed_of("host", self.me)
            d.fill(p, size, seed)  # through the link; the CPU then looks, and every load checks
            d.sync()
            acc = Acc(self.me, HOST)
            d.zero_bad(1)
            d.timed(1, 1, lambda r, k: d.read_check([p], [seed], size))  # warm-up, checked too
            ms = d.timed(self.a.reps, inner, lambda r, k: d.read_check([p], [seed], size))
            acc.add(size * (1 + self.a.reps * inner), d.bad(1)[0])
            return {"samples_gbps": self.rates([m / inner for m in ms], size), "checks": [acc.rec()],
                    "cpu_check": self.spot(h, size, seed)}
        finally:
            d.host_free(h)

    def _host_store(self, size, inner):
        d = self.dev
        h, p = d.host_alloc(inner * size)
        try:
            acc, ms, seeds = Acc(self.me, HOST), [], []
            for r in range(self.a.reps + 1):
                seeds = [seed_of("host-store", self.me, r, k) for k in range(inner)]
                t = d.timed(1, inner, lambda _r, k: d.write([p + k * size], [seeds[k]], size))
                if r:
                    ms += t
                d.zero_bad(1)
                for k in range(inner):
                    d.check(p + k * size, size, seeds[k])
                acc.add(inner * size, d.bad(1)[0])
            return {"samples_gbps": self.rates([m / inner for m in ms], size), "checks": [acc.rec()],
                    "cpu_check": self.spot(h + (inner - 1) * size, size, seeds[-1])}
        finally:
            d.host_free(h)

    def spot(self, host_addr, size, seed):
        """The CPU's own look at words of pinned host memory the GPU wrote:
        "ok", or what it found."""
        n = min(size, getattr(self.dev, "max_bytes", size)) // 4  # a stub moves its first max_bytes
        mem = (ctypes.c_uint32 * n).from_address(host_addr) if isinstance(self.dev, Cuda) else None
        for i in sorted(set([0, 1, n // 2, n - 1] + [(k * 7919) % n for k in range(1, 64)])):
            got = mem[i] if mem is not None else self.dev.read_words(host_addr + 4 * i, 1)[0]
            if got != pattern(seed, i):
                return "the CPU read %#010x at word %d of the pinned host memory the GPU wrote, want %#010x" % (got, i, pattern(seed, i))
        return "ok"

    def host_latency(self, gpu):
        def body():
            d = self.dev
            h, p = d.host_alloc(256 * self.ring_slots)
            try:
                d.make_ring(p, self.ring_slots, 97)
                return self._chase(p, HOST)
            finally:
                d.host_free(h)
        self.one({"test": "latency", "op": "host_read", "rank": gpu}, gpu, body)

    def _chase(self, ring, peer):
        warm, hops = 64, 1000
        samples, acc = [], Acc(self.me, peer)
        want = 64 * (((warm + hops) * 97) % self.ring_slots)
        for _ in range(self.a.reps):
            ns, idx = self.dev.chase(ring, warm, hops)
            acc.add(4 * (warm + hops), (0, None, None) if idx == want else (1, warm + hops, idx))
            samples.append(ns / hops / 1000.0)
        return {"samples_us": samples, "checks": [acc.rec()]}

    # -- one GPU pair, alone
    def pair(self, i, j, size):
        inner = self.slots(size)
        key = {"test": "pair", "op": "read", "rank": i, "peer": j, "bytes": size}
        if not self.skip(key, [(i, j)]):
            self.one(key, i, lambda: self._read([j], size, inner))
        key = {"test": "pair", "op": "write", "rank": i, "peer": j, "bytes": size}
        if not self.skip(key, [(i, j)]):
            self._write(key, i, j, size, inner)

    def _read(self, srcs, size, inner):
        d = self.dev
        ptrs = [self.peer_base[s] for s in srcs]
        seeds = [seed_of("data", s) for s in srcs]
        d.zero_bad(len(srcs))
        d.timed(1, 1, lambda r, k: d.read_check(ptrs, seeds, size))  # warm-up, checked too
        ms = d.timed(self.a.reps, inner, lambda r, k: d.read_check(ptrs, seeds, size))
        checks = []
        for s, b in zip(srcs, d.bad(len(srcs))):
            acc = Acc(self.me, s)
            acc.add(size * (1 + self.a.reps * inner), b)
            checks.append(acc.rec())
        return {"samples_gbps": self.rates([m / inner for m in ms], size * len(srcs)), "checks": checks}

    def _write(self, key, i, j, size, inner):
        """i stores into j's memory, a slot per launch; after each rep j
        checks every slot, before i writes again."""
        self.start(key)
        err, ms, acc = "", [], Acc(i, j)
        for r in range(self.a.reps + 1):
            seeds = [seed_of("write", i, j, r, k) for k in range(inner)]
            if self.me == i and not err:
                try:
                    d, dst = self.dev, self.peer_base[j] + self.off_recv
                    t = d.timed(1, inner, lambda _r, k: d.write([dst + k * size], [seeds[k]], size))
                    if r:
                        ms += t
                except Exception as e:
                    err = errtext(e)
            self.comm.barrier()
            if self.me == j and not err:
                try:
                    self.dev.zero_bad(1)
                    for k in range(inner):
                        self.dev.check(self.base + self.off_recv + k * size, size, seeds[k])
                    acc.add(inner * size, self.dev.bad(1)[0])
                except Exception as e:
                    err = "the check on the peer: " + errtext(e)
            self.comm.barrier()
        parts = self.comm.gather({"ms": ms, "err": err, "check": acc.rec()})
        rec = dict(key, samples_gbps=self.rates([m / inner for m in parts[i]["ms"]], size), checks=[parts[j]["check"]])
        if parts[i]["err"] or parts[j]["err"]:
            rec["error"] = parts[i]["err"] or parts[j]["err"]
        self.result(rec)

    def latency(self, i, j):
        """The flag round trip between i and j (i leads), then i's
        dependent loads around j's ring and j's around i's."""
        key = {"test": "latency", "op": "flag_rtt", "rank": i, "peer": j}
        if not self.skip(key, [(i, j), (j, i)]):
            self._pingpong(key, i, j)
        for a, b in ((i, j), (j, i)):
            key = {"test": "latency", "op": "read", "rank": a, "peer": b}
            if not self.skip(key, [(a, b)]):
                self.one(key, a, lambda: self._chase(self.peer_base[b] + self.off_ring, b))

    def _pingpong(self, key, i, j):
        self.start(key)
        samples, err = [], ""
        iters, warm = 1000, 32
        for _ in range(self.a.reps):
            self.epoch += 1
            base = (self.epoch << 16) & MASK
            self.comm.barrier()
            if self.me in (i, j) and not err:
                peer = j if self.me == i else i
                try:
                    ns, timed_out = self.dev.pingpong(self.peer_base[peer] + self.off_flags + 4 * (64 + self.me),
                                                      self.base + self.off_flags + 4 * (64 + peer), base, warm, iters,
                                                      1 if self.me == i else 0, self.timeout_ns)
                    if timed_out:
                        err = "no answer within %gs: flags stored into the peer's memory never arrived, or its answers never came back" % self.a.device_timeout
                    samples.append(ns / iters / 1000.0)
                except Exception as e:
                    err = errtext(e)
        parts = self.comm.gather({"samples": samples, "err": err})
        rec = dict(key)
        if parts[i]["err"] or parts[j]["err"]:
            rec["error"] = parts[i]["err"] or parts[j]["err"]
        else:
            rec["samples_us"] = parts[i]["samples"]
        self.result(rec)

    # -- the kernels' patterns: a group all at once
    def pattern(self, name, group, op):
        """Every rank of group reads (op "read": as 1-stage pulls) or writes
        (op "write": as a push does) --pattern-bytes from or to every other
        at once, or makes dependent loads around every other's ring at once
        (op "read_latency": a round of reads under all-to-all load), after
        a start barrier on the GPUs."""
        size = self.a.pattern_bytes
        key = {"test": "pattern", "name": name, "op": op, "ranks": group, "bytes": size}
        if self.skip(key, [(a, b) for a in group for b in group if a != b]):
            return
        self.start(key)
        others = [r for r in group if r != self.me]
        slot = {r: k for k, r in enumerate(group)}
        accs = {r: Acc(r, self.me) if op == "write" else Acc(self.me, r) for r in others}
        ms, err = [], ""
        warm, hops = 16, 200
        for rep in range(self.a.reps + 1):
            self.epoch += 1
            self.comm.barrier()
            if self.me in group and not err:
                d = self.dev
                try:
                    d.upload(self.out8, bytes(8))
                    d.barrier([self.peer_base[r] + self.off_flags + 4 * self.me for r in others], others,
                              self.base + self.off_flags, self.epoch, self.timeout_ns, self.out8)
                    if op == "read":
                        ptrs = [self.peer_base[r] for r in others]
                        d.zero_bad(len(others))
                        t = d.timed(1, 1, lambda _r, _k: d.read_check(ptrs, [seed_of("data", r) for r in others], size))
                        for r, b in zip(others, d.bad(len(others))):
                            accs[r].add(size, b)
                    elif op == "write":
                        ptrs = [self.peer_base[r] + self.off_recv + slot[self.me] * size for r in others]
                        t = d.timed(1, 1, lambda _r, _k: d.write(ptrs, [seed_of("a2a", self.me, r, rep) for r in others], size))
                    else:
                        res = d.chase_many([self.peer_base[r] + self.off_ring for r in others], warm, hops)
                        want = 64 * (((warm + hops) * 97) % self.ring_slots)
                        for r, (_, idx) in zip(others, res):
                            accs[r].add(4 * (warm + hops), (0, None, None) if idx == want else (1, warm + hops, idx))
                        t = [max(ns for ns, _ in res) / hops / 1e6]  # ms per round: the slowest peer's load
                    if int.from_bytes(d.download(self.out8, 8), "little"):
                        err = "the start barrier timed out (%gs): a peer's flag never arrived" % self.a.device_timeout
                    elif rep:
                        ms += t
                except Exception as e:
                    err = errtext(e)
            self.comm.barrier()
            if op == "write" and self.me in group and not err:
                try:
                    for r in others:
                        self.dev.zero_bad(1)
                        self.dev.check(self.base + self.off_recv + slot[r] * size, size, seed_of("a2a", r, self.me, rep))
                        accs[r].add(size, self.dev.bad(1)[0])
                except Exception as e:
                    err = "the check on the receiver: " + errtext(e)
            self.comm.barrier()
        # Per rep, in µs: the kernel's time (read, write) or one round of
        # dependent loads (read_latency).
        parts = self.comm.gather({"us": [m * 1000.0 for m in ms], "err": err, "checks": [a.rec() for a in accs.values()]})
        rec = dict(key, per_rank_us={str(r): parts[r]["us"] for r in group}, checks=[c for r in group for c in parts[r]["checks"]])
        errs = ["rank %d: %s" % (r, parts[r]["err"]) for r in group if parts[r]["err"]]
        if errs:
            rec["error"] = "; ".join(errs)
        self.result(rec)

    def close(self):
        for p in self.peer_base.values():
            try:
                self.dev.ipc_close(p)
            except Exception:
                pass  # the process ends next; the driver unmaps what is left


def run_rank(dev, comm, args, emit):
    """Every test, in order, on this rank (see the module's doc)."""
    pr = Probe(dev, comm, args, emit)
    if not pr.setup():
        if comm.rank == 0:
            emit({"event": "done", "error": "a rank's self-check failed, so nothing was measured (see its env record)"})
        comm.barrier()
        return
    ranks = list(range(pr.n))
    for g in ranks:
        for s in pr.sizes:
            pr.host(g, s)
        pr.host_latency(g)
    for i in ranks:
        for j in ranks:
            if i != j:
                for s in pr.sizes:
                    pr.pair(i, j, s)
            if i < j:
                pr.latency(i, j)
    for spec in [p for p in args.patterns.split(";") if p]:
        name, members = spec.split(":", 1)
        group = [int(x) for x in members.split(",")]
        for op in ("read", "write", "read_latency"):
            pr.pattern(name, group, op)
    if comm.rank == 0:
        emit({"event": "done"})
    comm.barrier()
    pr.close()


def parse_set(specs):
    out = set()
    for s in specs:
        op, a, b = s.split(":")
        out.add((op, int(a), HOST if b == "host" else int(b)))
    return out


def parse_rates(specs):
    out = {}
    for s in specs:
        op, a, b, v = s.split(":")
        out[(op, a if a == "*" else int(a), b if b == "*" else HOST if b == "host" else int(b))] = float(v)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", required=True, help="bytes per transfer, comma-separated, multiples of 16")
    ap.add_argument("--pattern-bytes", type=int, required=True, help="bytes per peer in the all-to-all patterns")
    ap.add_argument("--patterns", default="", help="NAME:RANK,RANK,...;... groups for the all-to-all patterns")
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--min-rep-bytes", type=int, default=32 << 20)
    ap.add_argument("--device-timeout", type=float, default=5.0, help="seconds a kernel waits for a peer's flag")
    ap.add_argument("--stub-world-size", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stub-corrupt", action="append", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--stub-rate", action="append", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--stub-bus-ids", default="", help=argparse.SUPPRESS)
    ap.add_argument("--stub-max-bytes", type=int, default=64, help=argparse.SUPPRESS)
    args = ap.parse_args()
    world_size = args.stub_world_size or int(os.environ.get("WORLD_SIZE", "1"))
    for spec in [p for p in args.patterns.split(";") if p]:
        if ":" not in spec or any(not x.isdigit() or int(x) >= world_size for x in spec.split(":", 1)[1].split(",")):
            ap.error("--patterns %r: want NAME:RANK,RANK,... with ranks below the world size %d" % (spec, world_size))
    lock, out = threading.Lock(), []

    def emit(rec):  # rank 0's only (Probe.start, Probe.result, run_rank)
        with lock:
            if not out:
                out.append(open(args.out, "a"))
            out[0].write(json.dumps(rec, allow_nan=False) + "\n")
            out[0].flush()

    if args.stub_world_size:
        sys.setswitchinterval(1e-5)  # ranks as threads hand over at every barrier: no 5 ms waits
        world = StubWorld(parse_set(args.stub_corrupt), parse_rates(args.stub_rate), args.stub_max_bytes)
        shared = {"size": args.stub_world_size, "barrier": threading.Barrier(args.stub_world_size),
                  "slots": [None] * args.stub_world_size}
        errors = []
        buses = [b for b in args.stub_bus_ids.split(",") if b] or [""] * args.stub_world_size

        def rank(r):
            try:
                run_rank(Stub(world, r, buses[r]), ThreadComm(shared, r), args, emit)
            except Exception as e:  # a stub rank that fails must fail the run, as a GPU rank would
                errors.append(e)
                shared["barrier"].abort()
                raise
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(args.stub_world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            sys.exit(1)
        return
    local = int(os.environ.get("LOCAL_RANK", "0"))
    comm = TorchComm()
    dev = Cuda(local)
    run_rank(dev, comm, args, emit)
    comm.close()


if __name__ == "__main__":
    main()
