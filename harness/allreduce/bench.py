"""arpatch allreduce micro-benchmark: one process per rank, started by
`python -m torch.distributed.run --nproc-per-node N bench.py ...` from
`arpatch bench allreduce` and `arpatch tune allreduce`.

For each implementation, branch, size, dtype and mode it first checks that
the result is the exact sum over ranks (a kernel that launches nothing
leaves the output as it was: WRONG, never fast), then times it: eager
loops, and loops captured in a CUDA graph (as nccl-tests -G does) where
that works. Rank 0 appends one JSON object per line to --out as soon as
each result is known, after a "start" record, so a hang still tells which
case hung.

Implementations:
  nccl            torch.distributed.all_reduce on the NCCL process group
                  (under whatever NCCL_* variables the run was given)
  custom-1stage   the patched sgl-kernel custom allreduce, forced 1-stage
  custom-2stage   forced 2-stage (upstream's SGLANG_CUSTOM_ALLREDUCE_ALGO)
  custom-push1    the pcie series' one-shot push, forced with
                  SGLANG_PCIE_CUSTOM_AR_ALGO=push1 (PCIe branch only)
  custom-push2    two-shot push (SGLANG_PCIE_CUSTOM_AR_ALGO=push2)
  custom-island   island-aware push (SGLANG_PCIE_CUSTOM_AR_ALGO=island),
                  once per --islands layout
  custom-auto     the kernel's own choice by world size, NVLink and size,
                  under the run's SGLANG_PCIE_CUSTOM_AR_* variables (unset:
                  auto), once per --islands layout
Custom implementations run once per branch: "nvlink" (init with
full_nvlink=True) and "pcie" (full_nvlink=False, the branch the arpatch pcie
series adds for world sizes above 2). The push implementations exist on the
PCIe branch only: on the nvlink branch they are reported not applicable
(the kernel would run upstream's dispatch there), never timed. Each forcing
variable is set just before init_custom_ar, which reads it once, and the
others are cleared, so that none leaks into another implementation.

Before any push implementation runs, init_custom_ar is given
SGLANG_PCIE_CUSTOM_AR_ALGO=bogus on the PCIe branch: an extension that takes
it predates the push algorithms, and its push implementations are reported
unsupported, never timed (they would time another kernel).

Sizes are byte counts, or "cap": each implementation's largest size that
fits the communicator (max_size bytes of input and of scratch after the
Signal block; the push algorithms' scratch needs, as the pcie series
counts them (0001's CustomAllreduce::pcie_scratch_needed, 0002's
_pcie_scratch_needed), are in scratch_need). A size that does not fit is reported not applicable, as
is one above --custom-max-bytes (0002's gate sends it to NCCL).

The custom allreduce comes from the extension built by
`arpatch build --allreduce-ext` (--ext PATH), whose functions mirror
sgl-kernel's: init_custom_ar, register_buffer, all_reduce, dispose,
meta_size, get_graph_buffer_ipc_meta, register_graph_buffers.
"""
import argparse
import ctypes
import glob
import importlib.util
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist


# ---------------------------------------------------------------- CUDA IPC

class _IpcHandle(ctypes.Structure):
    # c_ubyte, not c_char: a c_char array reads back as a NUL-terminated
    # bytes copy, which would cut and lose the handle.
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


class CudaIpc:
    """The few CUDA runtime calls needed to share device buffers between
    processes, through ctypes: cudaMalloc, cudaMemset, cudaFree,
    cudaIpcGetMemHandle, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle."""

    def __init__(self, device):
        self.lib = self._load()
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        self.lib.cudaMalloc.argtypes = [ctypes.POINTER(vp), sz]
        self.lib.cudaMemset.argtypes = [vp, ctypes.c_int, sz]
        self.lib.cudaFree.argtypes = [vp]
        self.lib.cudaIpcGetMemHandle.argtypes = [ctypes.POINTER(_IpcHandle), vp]
        self.lib.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(vp), _IpcHandle, ctypes.c_uint]
        self.lib.cudaIpcCloseMemHandle.argtypes = [vp]
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p
        self.lib.cudaDeviceSynchronize.argtypes = []
        # This libcudart may be another copy than torch's, with its own
        # current device: set it, or rank 1's buffers land on GPU 0.
        self._check(self.lib.cudaSetDevice(device), "cudaSetDevice(%d)" % device)

    @staticmethod
    def _load():
        names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
        dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
        for sp in sys.path:
            dirs += glob.glob(os.path.join(sp, "nvidia", "*", "lib"))
            dirs += glob.glob(os.path.join(sp, "nvidia", "cuda_runtime", "lib"))
        dirs += [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64")]
        for n in names:
            try:
                return ctypes.CDLL(n)
            except OSError:
                pass
            for d in dirs:
                for p in glob.glob(os.path.join(d, n + "*")):
                    try:
                        return ctypes.CDLL(p)
                    except OSError:
                        pass
        raise RuntimeError("libcudart not found (looked for %s in torch/lib, nvidia/*/lib, $CUDA_HOME/lib64)" % names)

    def _check(self, err, what):
        if err != 0:
            raise RuntimeError("%s: CUDA error %d: %s" % (what, err, self.lib.cudaGetErrorString(err).decode()))

    def malloc(self, n):
        p = ctypes.c_void_p()
        self._check(self.lib.cudaMalloc(ctypes.byref(p), n), "cudaMalloc(%d)" % n)
        return p.value

    def memset(self, ptr, value, n):
        self._check(self.lib.cudaMemset(ptr, value, n), "cudaMemset")
        self._check(self.lib.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def free(self, ptr):
        self._check(self.lib.cudaFree(ptr), "cudaFree")

    def handle(self, ptr):
        h = _IpcHandle()
        self._check(self.lib.cudaIpcGetMemHandle(ctypes.byref(h), ptr), "cudaIpcGetMemHandle")
        return bytes(h)

    def open(self, handle):
        h = _IpcHandle.from_buffer_copy(handle)
        p = ctypes.c_void_p()
        self._check(self.lib.cudaIpcOpenMemHandle(ctypes.byref(p), h, 1), "cudaIpcOpenMemHandle")
        return p.value

    def close(self, ptr):
        self._check(self.lib.cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle")


# ------------------------------------------------------ custom allreduce

class CustomAllreduce:
    """One communicator of the extension's custom allreduce: a Signal block
    plus scratch (meta_size() + max_size bytes) and an input buffer of
    max_size bytes on each rank, shared through CUDA IPC."""

    def __init__(self, ext, ipc, group, rank, world, max_size, full_nvlink):
        self.ext, self.ipc, self.group, self.rank = ext, ipc, group, rank
        self.max_size = max_size
        self.opened = []
        self.mine = []
        self.meta_ptrs = self._shared(ext.meta_size() + max_size, zero=True)
        self.buf_ptrs = self._shared(max_size, zero=False)
        self.rank_data = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
        try:
            self.fa = ext.init_custom_ar(self.meta_ptrs, self.rank_data, rank, full_nvlink)
        except Exception:
            # A refused init (a bad PCIe threshold) must not leak the buffers.
            self._release()
            raise
        ext.register_buffer(self.fa, self.buf_ptrs)

    def _shared(self, n, zero):
        ptr = self.ipc.malloc(n)
        self.mine.append(ptr)
        if zero:
            self.ipc.memset(ptr, 0, n)
        handles = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(handles, self.ipc.handle(ptr), group=self.group)
        ptrs = []
        for i, h in enumerate(handles):
            if i == self.rank:
                ptrs.append(ptr)
            else:
                p = self.ipc.open(h)
                self.opened.append(p)
                ptrs.append(p)
        return ptrs

    def eager(self, inp, out):
        self.ext.all_reduce(self.fa, inp, out, self.buf_ptrs[self.rank], self.max_size)

    def registered(self, inp, out):
        self.ext.all_reduce(self.fa, inp, out, 0, 0)

    def register_graph(self):
        handle, offsets = self.ext.get_graph_buffer_ipc_meta(self.fa)
        all_meta = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(all_meta, (handle, offsets), group=self.group)
        self.ext.register_graph_buffers(self.fa, [m[0] for m in all_meta], [m[1] for m in all_meta])

    def close(self):
        torch.cuda.synchronize()
        dist.barrier(group=self.group)
        self.ext.dispose(self.fa)
        self._release()

    def _release(self):
        for p in self.opened:
            self.ipc.close(p)
        for p in self.mine:
            self.ipc.free(p)
        self.opened, self.mine = [], []


def load_ext(path):
    name = os.path.basename(path).split(".")[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------ forcing

UPSTREAM_ALGO = "SGLANG_CUSTOM_ALLREDUCE_ALGO"  # upstream's: 1stage, 2stage; wins over everything
PCIE_ALGO = "SGLANG_PCIE_CUSTOM_AR_ALGO"        # the pcie series' schedule
PCIE_1STAGE = "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"  # its legacy form (pull1:B,pull2)
PCIE_ISLANDS = "SGLANG_PCIE_CUSTOM_AR_ISLANDS"

PULL = {"custom-1stage": "1stage", "custom-2stage": "2stage"}
PUSH = {"custom-push1": "push1", "custom-push2": "push2", "custom-island": "island"}
PER_LAYOUT = {"custom-island", "custom-auto"}  # the implementations that read the islands
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def forcing(impl):
    """The variables init_custom_ar must see for impl: a value to set, or
    None to clear. custom-auto keeps the run's own SGLANG_PCIE_CUSTOM_AR_*
    (the settings a tune checks) and only drops upstream's override."""
    if impl in PULL:
        return {UPSTREAM_ALGO: PULL[impl], PCIE_ALGO: None, PCIE_1STAGE: None}
    if impl in PUSH:
        return {UPSTREAM_ALGO: None, PCIE_ALGO: PUSH[impl], PCIE_1STAGE: None}
    return {UPSTREAM_ALGO: None}


class env_set:
    """Sets (value) or clears (None) variables for a with block, then puts
    back what was there."""

    def __init__(self, changes):
        self.changes, self.saved = changes, {}

    def __enter__(self):
        for k, v in self.changes.items():
            self.saved[k] = os.environ.get(k)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ceil_div(a, b):
    return -(-a // b)


def scratch_need(impl, world, island_size, size):
    """Bytes of scratch (the region after each rank's Signal block) the
    forced algorithm needs for an allreduce of size bytes, as the pcie series'
    0001 counts it (CustomAllreduce::pcie_scratch_needed):
    push1 N*S; push2 N*ceil(S/N) + S; island (M+K)*ceil(S/M) + S, with
    N ranks in K islands of M, each share rounded up to 16-byte packs. The
    pull algorithms' scratch (2-stage's S/N) always fits."""
    pack = lambda x: ceil_div(x, 16) * 16
    m = island_size or world
    k = world // m
    if impl == "custom-push1":
        return world * size
    if impl == "custom-push2":
        return world * pack(ceil_div(size, world)) + size
    if impl == "custom-island":
        return (m + k) * pack(ceil_div(size, m)) + size
    return 0


def cap_size(impl, world, island_size, max_size):
    """The largest multiple of 16 bytes, up to max_size, whose scratch need
    fits max_size (scratch_need is monotonic in the size)."""
    lo, hi = 1, max_size // 16
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if scratch_need(impl, world, island_size, mid * 16) <= max_size:
            lo = mid
        else:
            hi = mid - 1
    return lo * 16


# ---------------------------------------------------------------- measure

def expected_sum(n, world, device, dtype):
    base = (torch.arange(n, device=device) % 7).to(torch.float32)
    return (base * world + world * (world + 1) / 2).to(dtype)


def fill_input(t, rank):
    n = t.numel()
    t.copy_(((torch.arange(n, device=t.device) % 7) + rank + 1).to(t.dtype))


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def time_loop(fn, inner, reps):
    """Per-op microseconds for reps batches of inner calls, CUDA events."""
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1000.0 / inner)
    return samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", required=True, help="comma-separated byte counts, and cap")
    ap.add_argument("--impls", default="nccl,custom-1stage,custom-2stage,custom-auto")
    ap.add_argument("--branches", default="nvlink,pcie")
    ap.add_argument("--modes", default="eager,graph")
    ap.add_argument("--dtypes", default="bf16", help="comma-separated: bf16, fp16, fp32")
    ap.add_argument("--islands", action="append", default=[],
                    help="a layout of the ranks in islands for SGLANG_PCIE_CUSTOM_AR_ISLANDS (0,1/2,3); repeat for several")
    ap.add_argument("--ext", default="")
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--inner", type=int, required=True)
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--max-size", type=int, default=8 << 20)
    ap.add_argument("--custom-max-bytes", type=int, default=-1,
                    help="custom implementations take sizes up to this only, as 0002's SGLANG_PCIE_CUSTOM_AR_MAX_BYTES gate sends larger ones to NCCL (-1: no gate)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--probe-thresholds", action="store_true",
                    help="first check that init_custom_ar refuses a bad SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES (the pcie series' run-time thresholds)")
    args = ap.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    ndev = torch.cuda.device_count()
    torch.cuda.set_device(local % ndev)
    # NCCL refuses two ranks on one GPU; an oversubscribed run (more ranks
    # than GPUs, to reach the world-size > 2 branches on a small machine)
    # checks correctness of the custom allreduce only, over gloo.
    oversubscribed = world > ndev
    if oversubscribed:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local % ndev))
    cpu = dist.new_group(backend="gloo")
    dtypes = [d for d in args.dtypes.split(",") if d]
    sizes = [s for s in args.sizes.split(",") if s]
    impls = [s for s in args.impls.split(",") if s]
    modes = [s for s in args.modes.split(",") if s]
    layouts = args.islands
    out = open(args.out, "a") if rank == 0 else None

    def emit(rec):
        if out:
            out.write(json.dumps(rec, allow_nan=False) + "\n")
            out.flush()

    emit({"event": "env", "world_size": world, "devices": ndev, "oversubscribed": oversubscribed,
          "device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
          "nccl": ".".join(map(str, torch.cuda.nccl.version())), "dtype": ",".join(dtypes),
          "islands": layouts, "max_size": args.max_size})

    ext = load_ext(args.ext) if any(i.startswith("custom") for i in impls) else None
    ipc = CudaIpc(local % ndev) if ext else None

    def probe(event, name, bad, named):
        # init_custom_ar reads the pcie series' variables once and throws on
        # a bad value; an extension that takes it predates them. named: the
        # refusal must name the variable (an init that fails for another
        # reason is no refusal).
        rec = {"event": event, "variable": name, "value": bad, "refused": False}
        with env_set({name: bad, UPSTREAM_ALGO: None, (PCIE_1STAGE if name == PCIE_ALGO else PCIE_ALGO): None}):
            try:
                CustomAllreduce(ext, ipc, cpu, rank, world, 1 << 20, False).close()
            except Exception as e:
                msg = "%s: %s" % (type(e).__name__, e)
                rec.update(refused=not named or name in str(e), error=msg)
        emit(rec)
        dist.barrier(group=cpu)
        return rec["refused"]

    if ext is not None and args.probe_thresholds:
        probe("threshold_probe", PCIE_1STAGE, "16K", False)
    push_ok = True
    if ext is not None and any(i in PUSH for i in impls) and "pcie" in args.branches.split(","):
        push_ok = probe("algo_probe", PCIE_ALGO, "bogus", True)

    cases = []
    for impl in impls:
        if impl == "nccl":
            cases.append((impl, "-", None))
            continue
        for b in [b for b in args.branches.split(",") if b]:
            if b == "pcie" and impl in PER_LAYOUT and layouts:
                cases += [(impl, b, l) for l in layouts]
            else:
                cases.append((impl, b, None))

    for impl, branch, layout in cases:
        whole = {"event": "result", "impl": impl, "branch": branch, "ok": False}
        if layout is not None:
            whole["islands"] = layout
        if impl == "nccl" and oversubscribed:
            emit(dict(whole, skipped=True,
                      error="NCCL does not allow two ranks on one GPU (world size %d on %d GPUs)" % (world, ndev)))
            continue
        if impl in PUSH and branch == "nvlink":
            emit(dict(whole, not_applicable=True,
                      error="the push algorithms exist on the PCIe branch only (full_nvlink=false); with full_nvlink=true the kernel runs upstream's dispatch, so nothing of %s would be timed" % impl))
            continue
        if impl in PUSH and not push_ok:
            emit(dict(whole, unsupported=True,
                      error="init_custom_ar took %s=bogus: this extension predates the push algorithms, so %s would run another kernel" % (PCIE_ALGO, impl)))
            continue
        comm = None
        island_size = 0
        if impl.startswith("custom"):
            lay = layout if layout is not None else (layouts[0] if layouts and branch == "pcie" else None)
            if lay is not None:
                island_size = len(lay.split("/")[0].split(","))
            env = forcing(impl)
            if lay is not None:
                env[PCIE_ISLANDS] = lay
            try:
                with env_set(env):
                    comm = CustomAllreduce(ext, ipc, cpu, rank, world, args.max_size, branch == "nvlink")
            except Exception as e:  # a refused setting: this case's error, not the run's end
                emit(dict(whole, error="init_custom_ar: %s: %s" % (type(e).__name__, e)))
                dist.barrier(group=cpu)
                continue
        # The sizes of this case, each with whether it is the case's cap:
        # the largest that fits (max_size, or less for a push algorithm's
        # scratch), run once even where a listed size equals it.
        cap = args.max_size if impl not in PUSH else cap_size(impl, world, island_size, args.max_size)
        listed = sorted({int(s) for s in sizes if s != "cap"})
        plan = [(b, "cap" in sizes and b == cap) for b in listed]
        if "cap" in sizes and cap not in listed:
            plan = sorted(plan + [(cap, True)])
        for size, is_cap in plan:
            for dname in dtypes:
                dtype = getattr(torch, DTYPES[dname])
                elem = torch.tensor([], dtype=dtype).element_size()
                n = size // elem
                need = scratch_need(impl, world, island_size, size)
                unfit = None
                if comm is not None and 0 <= args.custom_max_bytes < size:
                    unfit = "%d bytes is above the custom allreduce cut (SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=%d): NCCL's, as the gate sends it" % (
                        size, args.custom_max_bytes)
                elif comm is not None and size > args.max_size:
                    unfit = "%d bytes is above the communicator's max_size (%d bytes)" % (size, args.max_size)
                elif comm is not None and need > args.max_size:
                    unfit = "%s needs %d bytes of scratch at %d bytes (world size %d), more than the %d bytes after the Signal block" % (
                        impl, need, size, world, args.max_size)
                inp = res = want = None
                if unfit is None:
                    inp = torch.empty(n, dtype=dtype, device="cuda")
                    res = torch.empty(n, dtype=dtype, device="cuda")
                    want = expected_sum(n, world, inp.device, dtype)
                if impl == "nccl":
                    def op():
                        res.copy_(inp)
                        dist.all_reduce(res)
                    op_graph = op
                else:
                    def op():
                        comm.eager(inp, res)

                    def op_graph():
                        comm.registered(inp, res)
                for mode in modes:
                    key = {"impl": impl, "branch": branch, "bytes": size, "mode": mode, "dtype": dname}
                    if layout is not None:
                        key["islands"] = layout
                    if is_cap:
                        key["cap"] = True
                    if unfit is not None:
                        emit(dict(key, event="result", ok=False, not_applicable=True, error=unfit))
                        continue
                    emit(dict(key, event="start", t=time.time()))
                    rec = dict(key, event="result")
                    try:
                        if mode == "eager":
                            call = op
                        else:
                            for _ in range(3):
                                op()  # warm up outside capture (NCCL init, kernel load)
                            torch.cuda.synchronize()
                            g = torch.cuda.CUDAGraph()
                            with torch.cuda.graph(g):
                                for _ in range(args.inner):
                                    op_graph()
                            if comm is not None:
                                comm.register_graph()
                            call = g.replay
                        # Correctness: the output must hold the exact sum.
                        fill_input(inp, rank)
                        res.fill_(float("nan"))
                        torch.cuda.synchronize()
                        dist.barrier(group=cpu)
                        call()
                        torch.cuda.synchronize()
                        bad = (res != want).nonzero()
                        ok = torch.tensor([1 if bad.numel() == 0 else 0])
                        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=cpu)
                        rec["ok"] = bool(ok.item())
                        if bad.numel():
                            i = int(bad[0])
                            # repr, not a float: JSON has no NaN, and NaN is what an
                            # output no kernel wrote to holds.
                            rec["wrong"] = {"rank": rank, "index": i, "got": repr(float(res[i])), "want": repr(float(want[i])),
                                            "mismatches": int(bad.numel()), "of": n}
                        if not rec["ok"] or oversubscribed:
                            # Time-sliced ranks make timings meaningless.
                            emit(rec)
                            continue
                        inner = 1 if mode == "graph" else args.inner
                        for _ in range(args.warmup):
                            call()
                        torch.cuda.synchronize()
                        dist.barrier(group=cpu)
                        samples = time_loop(call, inner, args.reps)
                        if mode == "graph":
                            samples = [s / args.inner for s in samples]
                        rec.update(median_us=percentile(samples, 0.5), p10_us=percentile(samples, 0.1),
                                   p90_us=percentile(samples, 0.9), samples_us=samples)
                    except Exception as e:  # a failure in one case must not hide the others
                        rec["ok"] = False
                        rec["error"] = "%s: %s" % (type(e).__name__, e)
                    emit(rec)
        if comm is not None:
            comm.close()
    emit({"event": "done"})
    dist.barrier(group=cpu)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
