"""A CPU stand-in for the CUDA parts of bench.py, for tests only: every
Python process started with this directory on PYTHONPATH (torchrun's ranks
among them) imports it first. It makes torch.cuda answer as FAKE_CUDA_DEVICES
(1) GPUs whose tensors live on the CPU, CUDA graphs that record the fake
extension's allreduces and replay them, CUDA events that read the wall
clock, and a libcudart (through ctypes) whose IPC handles name the
allocating rank's fake pointers. It runs bench.py's control flow as is: its
sums come from fake_ar.py over gloo, not from a GPU kernel. Nothing here
is a measurement."""
import contextlib
import ctypes
import os
import time

try:
    import torch
except ImportError:  # not the interpreter with torch: nothing to shim
    torch = None

CAPTURING = []  # the graph being captured, if any


class _Graph:
    def __init__(self):
        self.ops = []

    def replay(self):
        for op in self.ops:
            op()


@contextlib.contextmanager
def _graph(g, *a, **k):
    CAPTURING.append(g)
    try:
        yield
    finally:
        CAPTURING.pop()


class _Event:
    def __init__(self, *a, **k):
        self.t = None

    def record(self, *a):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1000.0


def _cpu(fn):
    def wrapped(*a, **k):
        if str(k.get("device", "")).startswith("cuda"):
            k["device"] = "cpu"
        return fn(*a, **k)
    return wrapped


class _Fn:
    """A libcudart function: argtypes and restype settable, returns 0."""

    def __init__(self, body=None):
        self.body, self.argtypes, self.restype = body, None, None

    def __call__(self, *a):
        if self.body:
            r = self.body(*a)
            return 0 if r is None else r
        return 0


class _Cudart:
    next_ptr = [0x1000]

    def __init__(self):
        pid = os.getpid()

        def malloc(ref, n):
            _Cudart.next_ptr[0] += 1 << 24
            ref._obj.value = (pid << 32) | _Cudart.next_ptr[0]

        def get_handle(ref, ptr):
            raw = ptr.to_bytes(8, "little") if isinstance(ptr, int) else ptr.value.to_bytes(8, "little")
            for i, b in enumerate(raw):
                ref._obj.reserved[i] = b

        def open_handle(ref, h, flags):
            ref._obj.value = int.from_bytes(bytes(h.reserved[:8]), "little") | (1 << 62)

        self.cudaMalloc = _Fn(malloc)
        self.cudaMemset = _Fn()
        self.cudaFree = _Fn()
        self.cudaIpcGetMemHandle = _Fn(get_handle)
        self.cudaIpcOpenMemHandle = _Fn(open_handle)
        self.cudaIpcCloseMemHandle = _Fn()
        self.cudaGetErrorString = _Fn(lambda e: b"shim")
        self.cudaDeviceSynchronize = _Fn()
        self.cudaSetDevice = _Fn()


_real_cdll = ctypes.CDLL


def _cdll(name, *a, **k):
    if "libcudart" in str(name):
        return _Cudart()
    return _real_cdll(name, *a, **k)


if torch is not None:
    ndev = int(os.environ.get("FAKE_CUDA_DEVICES", "1"))
    torch.cuda.device_count = lambda: ndev
    torch.cuda.set_device = lambda *a: None
    torch.cuda.get_device_name = lambda *a: "CPU shim (not a GPU)"
    torch.cuda.synchronize = lambda *a: None
    torch.cuda.Event = _Event
    torch.cuda.CUDAGraph = _Graph
    torch.cuda.graph = _graph

    class _Nccl:
        @staticmethod
        def version():
            return (0, 0, 0)

    torch.cuda.nccl = _Nccl
    torch.version.cuda = "none"
    torch.empty = _cpu(torch.empty)
    torch.arange = _cpu(torch.arange)
    ctypes.CDLL = _cdll
