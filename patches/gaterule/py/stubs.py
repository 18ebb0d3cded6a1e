# arpatch gate judge: stand-ins for what SGLang's gate modules import
# besides the tree and the standard library. Most are permissive: any
# attribute, call, base class or decorator works and means nothing. The
# ones that decide a gate are written to answer as a PCIe-only host of
# WS GPUs does (torch, torch.distributed, torch.cuda, pynvml, sgl_kernel's
# allreduce binding, libcudart through ctypes). Ranks are threads: each
# thread is one rank of the group and the collectives meet at a barrier.
import builtins
import ctypes
import importlib.abc
import importlib.machinery
import io
import sys
import threading
import types

world = threading.local()  # .rank of the running thread
group_state = {}  # "ws", "barrier", "slots", "calls"


def rank():
    return getattr(world, "rank", 0)


def ws():
    return group_state.get("ws", 1)


class StubBase:
    """The base a stub stands for when a class derives from it: any
    class keywords, any constructor arguments."""

    def __init_subclass__(cls, **kw):
        pass

    def __init__(self, *a, **kw):
        for k, v in kw.items():
            try:
                setattr(self, k, v)
            except Exception:
                pass


class Anything:
    """A value that takes any use and means nothing."""

    def __init__(self, name="stub"):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, k):
        if k.startswith("__") and k.endswith("__"):
            raise AttributeError(k)
        return Anything(self._name + "." + k)

    def __setattr__(self, k, v):
        pass

    def __call__(self, *a, **kw):
        if len(a) == 1 and not kw and (isinstance(a[0], type) or callable(a[0])) and not isinstance(a[0], Anything):
            return a[0]  # a decorator
        return Anything(self._name + "()")

    def __mro_entries__(self, bases):
        return (type(self._name.rsplit(".", 1)[-1] or "Stub", (StubBase,), {}),)

    def __getitem__(self, k):
        return Anything(self._name + "[]")

    def __setitem__(self, k, v):
        pass

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __bool__(self):
        return False

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def __lt__(self, o):
        return False

    __le__ = __gt__ = __ge__ = __contains__ = __lt__

    def __repr__(self):
        return "<arpatch stub " + self._name + ">"


def _same(self, *a):
    return self


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift", "matmul"):
    setattr(Anything, "__%s__" % _op, _same)
    setattr(Anything, "__r%s__" % _op, _same)
for _op in ("neg", "pos", "abs", "invert"):
    setattr(Anything, "__%s__" % _op, _same)


class StubModule(types.ModuleType):
    missing = ()  # names the real module does not have (hasattr is False)

    def __getattr__(self, k):
        if (k.startswith("__") and k.endswith("__")) or k in self.missing:
            raise AttributeError(k)
        v = Anything(self.__name__ + "." + k)
        setattr(self, k, v)
        return v


class dtype:
    def __init__(self, name, itemsize, floating):
        self.name, self.itemsize, self.is_floating_point = name, itemsize, floating

    def __repr__(self):
        return "torch." + self.name


DTYPES = {
    "float32": dtype("float32", 4, True),
    "float16": dtype("float16", 2, True),
    "bfloat16": dtype("bfloat16", 2, True),
    "float64": dtype("float64", 8, True),
    "int32": dtype("int32", 4, False),
    "int64": dtype("int64", 8, False),
    "int8": dtype("int8", 1, False),
    "uint8": dtype("uint8", 1, False),
    "bool": dtype("bool", 1, False),
}
ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "long": "int64"}


class device:
    def __init__(self, spec="cuda", index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        elif isinstance(spec, int):
            spec, index = "cuda", spec
        elif ":" in str(spec):
            spec, i = str(spec).split(":", 1)
            index = int(i)
        self.type, self.index = str(spec), index

    def __eq__(self, o):
        return isinstance(o, device) and (o.type, o.index) == (self.type, self.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return "device(%r)" % (self.type if self.index is None else "%s:%d" % (self.type, self.index))


class Storage:
    def __init__(self, n):
        self.n = n

    def nbytes(self):
        return self.n

    def size(self):
        return self.n


class Tensor:
    """A flat tensor: its data (a list) for the small ones the gates build,
    its byte size for the allreduce inputs."""

    def __init__(self, data=None, numel=None, dtype_=None, device_=None, shape=None):
        self.data = list(data) if data is not None else None
        self._numel = len(self.data) if self.data is not None else int(numel)
        self.dtype = dtype_ or DTYPES["float32"]
        self.device = device(device_ if device_ is not None else "cpu")
        self.shape = tuple(shape) if shape is not None else (self._numel,)
        self.reduced_by = None  # set by the allreduce binding on its output

    def numel(self):
        return self._numel

    def element_size(self):
        return self.dtype.itemsize

    def nbytes(self):
        return self._numel * self.dtype.itemsize

    def size(self, d=None):
        return self.shape if d is None else self.shape[d]

    def dim(self):
        return len(self.shape)

    def is_contiguous(self, *a, **kw):
        return True

    def storage(self):
        return Storage(self.nbytes())

    untyped_storage = storage

    def storage_offset(self):
        return 0

    def data_ptr(self):
        return 0x10000000 + id(self) % 0x1000000 * 256

    def _values(self):
        return self.data if self.data is not None else [0] * min(self._numel, 1 << 16)

    def tolist(self):
        return list(self._values())

    def item(self):
        return self._values()[0]

    def __int__(self):
        return int(self.item())

    def __index__(self):
        return int(self.item())

    def __float__(self):
        return float(self.item())

    def __bool__(self):
        return bool(self.item())

    def __len__(self):
        return self.shape[0] if self.shape else 0

    def __iter__(self):
        return iter([Tensor([v], dtype_=self.dtype) for v in self._values()])

    def __getitem__(self, i):
        if isinstance(i, int):
            return Tensor([self._values()[i]], dtype_=self.dtype, shape=())
        return self

    def __setitem__(self, i, v):
        if self.data is not None and isinstance(i, int):
            self.data[i] = v.item() if isinstance(v, Tensor) else v

    def __eq__(self, o):
        return self.tolist() == (o.tolist() if isinstance(o, Tensor) else o)

    __hash__ = object.__hash__

    def copy_(self, src, *a, **kw):
        if isinstance(src, Tensor) and src.data is not None:
            self.data = list(src.data)
        return self

    def clone(self, *a, **kw):
        return Tensor(self.data, self._numel, self.dtype, self.device, self.shape)

    def fill_(self, v):
        if self.data is not None:
            self.data = [v] * len(self.data)
        return self

    def to(self, *a, **kw):
        return self

    cpu = cuda = contiguous = detach = to

    def view(self, *a, **kw):
        if a and isinstance(a[0], dtype):
            return Tensor(None, self.nbytes() // a[0].itemsize, a[0], self.device)
        return self

    reshape = flatten = view

    def __getattr__(self, k):
        return Anything("Tensor." + k)


def make_tensor(args, kw, fill):
    shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    n = 1
    for s in shape:
        n *= int(s)
    dt = kw.get("dtype") or DTYPES["float32"]
    data = [fill] * n if n <= 1 << 16 else None
    return Tensor(data, n, dt, kw.get("device"), shape)


class Barrier:
    """The group's rendezvous: every collective deposits this rank's value
    and waits for the others."""

    def exchange(self, value):
        slots = group_state["slots"]
        slots[rank()] = value
        group_state["barrier"].wait()
        got = list(slots)
        group_state["barrier"].wait()
        return got


def build_torch():
    torch = StubModule("torch")
    torch.missing = ("npu", "hpu", "mlu", "musa", "sdaa", "mps_is_the_device")
    torch.__version__ = "2.9.0+cu128"
    for k, v in DTYPES.items():
        setattr(torch, k, v)
    for k, v in ALIASES.items():
        setattr(torch, k, DTYPES[v])
    torch.dtype, torch.device, torch.Tensor = dtype, device, Tensor
    torch.Size = tuple
    torch.tensor = lambda data, dtype=None, device=None, **kw: Tensor(
        [int(x) if not isinstance(x, float) else x for x in (data if isinstance(data, (list, tuple)) else [data])],
        dtype_=dtype, device_=device)
    torch.empty = lambda *a, **kw: make_tensor(a, kw, 0)
    torch.zeros = torch.empty
    torch.ones = lambda *a, **kw: make_tensor(a, kw, 1)
    torch.empty_like = lambda t, **kw: Tensor(None, t.numel(), kw.get("dtype", t.dtype), t.device, t.shape)
    torch.zeros_like = torch.empty_like
    torch.is_tensor = lambda x: isinstance(x, Tensor)
    version = types.ModuleType("torch.version")
    version.__version__, version.cuda, version.hip, version.git_version, version.debug = torch.__version__, "12.8", None, "0", False
    torch.version = version
    for sub in ("cuda", "distributed"):
        m = SEMANTIC["torch." + sub]()
        m.__arpatch_stub__ = True
        sys.modules["torch." + sub] = m
        setattr(torch, sub, m)
    return torch


def build_cuda():
    cuda = StubModule("torch.cuda")
    cuda.__path__ = []
    cuda.is_available = lambda: True
    cuda.device_count = ws
    cuda.current_device = rank
    cuda.set_device = lambda d: None
    cuda.can_device_access_peer = lambda a, b: True
    cuda.is_current_stream_capturing = lambda: False
    cuda.get_device_name = lambda *a: "NVIDIA H200"
    cuda.get_device_capability = lambda *a: (9, 0)
    cuda.synchronize = lambda *a: None
    cuda.mem_get_info = lambda *a: (140 << 30, 141 << 30)
    return cuda


def build_dist():
    dist = StubModule("torch.distributed")
    dist.__path__ = []

    class ProcessGroup:
        pass

    class Backend(str):
        NCCL, GLOO, MPI, UNDEFINED = "nccl", "gloo", "mpi", "undefined"

    class ReduceOp:
        SUM, PRODUCT, MIN, MAX = 0, 1, 2, 3  # int(ReduceOp.SUM) is 0

    dist.ProcessGroup, dist.Backend, dist.ReduceOp = ProcessGroup, Backend, ReduceOp
    dist.is_initialized = lambda: False
    dist.is_available = lambda: True
    dist.get_rank = lambda group=None: rank()
    dist.get_world_size = lambda group=None: ws()
    dist.get_backend = lambda group=None: Backend.GLOO
    dist.get_process_group_ranks = lambda group=None: list(range(ws()))
    b = Barrier()

    def all_gather(out, t, group=None, async_op=False):
        for i, v in enumerate(b.exchange(t.clone())):
            out[i].copy_(v)

    def all_gather_object(out, obj, group=None):
        for i, v in enumerate(b.exchange(obj)):
            out[i] = v

    def broadcast_object_list(objs, src=0, group=None, device=None):
        got = b.exchange(list(objs))[src]
        objs[:] = got

    def broadcast(t, src=0, group=None, async_op=False):
        t.copy_(b.exchange(t.clone())[src])

    def all_reduce(t, op=ReduceOp.SUM, group=None, async_op=False):
        got = b.exchange(t.clone())
        if t.data is not None:
            cols = list(zip(*[g.data for g in got]))
            pick = {ReduceOp.MAX: max, ReduceOp.MIN: min}.get(op, sum)
            t.data = [pick(c) for c in cols]

    def barrier(group=None, **kw):
        b.exchange(None)

    dist.all_gather, dist.all_gather_object = all_gather, all_gather_object
    dist.broadcast_object_list, dist.broadcast, dist.all_reduce = broadcast_object_list, broadcast, all_reduce
    dist.barrier = barrier
    return dist


def build_pynvml():
    nv = StubModule("pynvml")

    class NVMLError(Exception):
        pass

    nv.NVMLError = NVMLError
    consts = dict(
        NVML_P2P_CAPS_INDEX_READ=0, NVML_P2P_CAPS_INDEX_WRITE=1, NVML_P2P_CAPS_INDEX_NVLINK=2,
        NVML_P2P_CAPS_INDEX_ATOMICS=3, NVML_P2P_CAPS_INDEX_PROP=4, NVML_P2P_STATUS_OK=0,
        NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED=1, NVML_P2P_STATUS_NOT_SUPPORTED=5,
        NVML_TOPOLOGY_INTERNAL=0, NVML_TOPOLOGY_SINGLE=10, NVML_TOPOLOGY_MULTIPLE=20,
        NVML_TOPOLOGY_HOSTBRIDGE=30, NVML_TOPOLOGY_NODE=40, NVML_TOPOLOGY_SYSTEM=50,
        NVML_FEATURE_DISABLED=0, NVML_FEATURE_ENABLED=1)
    for k, v in consts.items():
        setattr(nv, k, v)
    nv.nvmlInit = nv.nvmlShutdown = lambda *a: None
    nv.nvmlDeviceGetCount = ws
    nv.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", int(i))

    def socket(h):
        return 0 if h[1] < max(ws() // 2, 1) else 1

    def p2p(a, b, cap):
        return nv.NVML_P2P_STATUS_NOT_SUPPORTED if cap == nv.NVML_P2P_CAPS_INDEX_NVLINK else nv.NVML_P2P_STATUS_OK

    def ancestor(a, b):
        return nv.NVML_TOPOLOGY_NODE if socket(a) == socket(b) else nv.NVML_TOPOLOGY_SYSTEM

    def nvlink(*a):
        raise NVMLError("NVML_ERROR_NOT_SUPPORTED")

    nv.nvmlDeviceGetP2PStatus = p2p
    nv.nvmlDeviceGetTopologyCommonAncestor = ancestor
    nv.nvmlDeviceGetNvLinkState = nv.nvmlDeviceGetNvLinkRemotePciInfo = nvlink
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    nv.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    nv.nvmlDeviceGetIndex = lambda h: h[1]
    return nv


def build_allreduce():
    """sgl_kernel.allreduce, the C++ binding: it records what Python hands
    to sgl-kernel and marks the output of each all_reduce as reduced."""
    ar = StubModule("sgl_kernel.allreduce")

    def calls():
        return group_state.setdefault("calls", {})

    def init_custom_ar(ptrs, rank_data, r, full_nvlink, *a):
        import os

        env = {k: v for k, v in dict.items(os.environ) if k != "HOME"}  # what sgl-kernel's constructor reads
        calls().setdefault(rank(), {})["init"] = {"full_nvlink": bool(full_nvlink), "ptrs": len(ptrs), "env": env}
        return 0x1000 + rank()

    def all_reduce(fa, inp, out, *a):
        mine = calls().setdefault(rank(), {})
        mine["all_reduce"] = mine.get("all_reduce", 0) + 1
        out.reduced_by = "sgl_kernel.allreduce.all_reduce"

    ar.init_custom_ar, ar.all_reduce = init_custom_ar, all_reduce
    ar.meta_size = lambda: 3456  # sizeof(Signal): 3 x 36 x 8 flags of 4 bytes
    ar.dispose = ar.register_buffer = ar.register_graph_buffers = lambda *a: None
    ar.get_graph_buffer_ipc_meta = lambda *a: ([], [])
    return ar


class FakeCudart:
    """libcudart through ctypes, as cuda_wrapper.CudaRTLibrary loads it."""

    class Fn:
        def __init__(self, name):
            self.name, self.restype, self.argtypes = name, None, None

        def __call__(self, *a):
            if self.name in ("cudaMalloc", "cudaIpcOpenMemHandle"):
                ref = a[0]._obj if hasattr(a[0], "_obj") else a[0]
                ref.value = 0x7F0000000000 + (rank() << 32) + FakeCudart.next()
            if self.name == "cudaGetErrorString":
                return b"no error"
            return 0

    counter = [0]

    @staticmethod
    def next():
        FakeCudart.counter[0] += 1 << 24
        return FakeCudart.counter[0]

    def __getattr__(self, k):
        f = FakeCudart.Fn(k)
        object.__setattr__(self, k, f)
        return f


def install_host():
    """What touches the host: processes refused, libcudart faked, shared
    memory kept in this process."""
    import multiprocessing
    import os
    import subprocess

    def refuse(*a, **kw):
        raise OSError("the arpatch gate judge runs no processes")

    subprocess.run = subprocess.Popen = subprocess.check_output = subprocess.call = refuse
    os.system = os.popen = refuse
    real_cdll = ctypes.CDLL

    def cdll(name, *a, **kw):
        if "libcudart" in str(name):
            return FakeCudart()
        return real_cdll(name, *a, **kw)

    ctypes.CDLL = cdll
    real_open = builtins.open

    def open_(f, *a, **kw):
        if f == "/proc/self/maps":
            return io.StringIO("7f0000000000-7f0000001000 r-xp 00000000 00:00 0 /usr/local/cuda/lib64/libcudart.so.12\n")
        return real_open(f, *a, **kw)

    builtins.open = open_
    shm = types.ModuleType("multiprocessing.shared_memory")
    segments = {}

    class SharedMemory:
        def __init__(self, name=None, create=False, size=0, **kw):
            if create:
                name = name or "arpatch%d" % len(segments)
                segments[name] = bytearray(size)
            if name not in segments:
                raise FileNotFoundError(name)
            self.name, self.buf, self.size = name, memoryview(segments[name]), len(segments[name])

        def close(self):
            pass

        def unlink(self):
            segments.pop(self.name, None)

    shm.SharedMemory = SharedMemory
    sys.modules["multiprocessing.shared_memory"] = shm
    multiprocessing.shared_memory = shm


SEMANTIC = {
    "torch": build_torch,
    "torch.cuda": build_cuda,
    "torch.distributed": build_dist,
    "pynvml": build_pynvml,
    "sgl_kernel.allreduce": build_allreduce,
}


# Packages a CUDA host's SGLang environment does not have: importing them
# fails, as there (SGLang tries them to detect other platforms).
ABSENT = {"torch_npu", "torchada", "amdsmi", "pymtml", "aiter", "habana_frameworks", "intel_extension_for_pytorch",
          "mindspore", "torch_mlu", "torch_musa", "deep_ep_npu", "vllm"}


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: every module neither the tree nor the
    standard library has."""

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in ABSENT or (top != name and getattr(sys.modules.get(top), "__arpatch_tree__", False)):
            return None  # absent here; or a module the tree's package lacks: an ImportError, as in Python
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        if spec.name in sys.modules:  # torch.cuda and torch.distributed come with torch
            return sys.modules[spec.name]
        if spec.name in SEMANTIC:
            m = SEMANTIC[spec.name]()
        elif spec.name == "typing_extensions":
            import typing

            m = StubModule(spec.name)
            m.__dict__.update({k: getattr(typing, k) for k in dir(typing) if not k.startswith("__")})
        else:
            m = StubModule(spec.name)
        m.__path__ = []
        m.__arpatch_stub__ = True
        return m

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)
