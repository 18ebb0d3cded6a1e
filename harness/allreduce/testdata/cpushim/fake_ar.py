"""A fake allreduce extension for bench.py under the CPU shim (tests only):
the functions of arpatch's allreduce extension, with the pcie series'
init-time checks as 0001 makes them in init_custom_ar (a bad
SGLANG_PCIE_CUSTOM_AR_ALGO,
SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES or SGLANG_PCIE_CUSTOM_AR_ISLANDS
is a ValueError naming the variable; the schedule and the legacy limit
together are refused), and sums over gloo. FAKE_EXT_OLD=1 is an extension
from before the push kernels (it reads neither the schedule nor the
islands); FAKE_EXT_WRONG=push1 leaves that algorithm's output as it was
(a kernel that launched nothing)."""
import os

import torch
import torch.distributed as dist

import sitecustomize

ALGOS = ("push1", "push2", "island", "pull1", "pull2")


def _schedule(raw):
    if raw in ("", "auto"):
        return None
    steps = raw.split(",")
    out, last = [], -1
    for i, st in enumerate(steps):
        algo, _, bound = st.partition(":")
        if algo not in ALGOS or (i == len(steps) - 1) == bool(bound):
            raise ValueError("SGLANG_PCIE_CUSTOM_AR_ALGO=%r: bad step %r" % (raw, st))
        if bound:
            if not bound.isdigit() or int(bound) <= last:
                raise ValueError("SGLANG_PCIE_CUSTOM_AR_ALGO=%r: bad bound %r" % (raw, st))
            last = int(bound)
        out.append((algo, int(bound) if bound else None))
    return out


class _Comm:
    pass


def meta_size():
    return 1024


def init_custom_ar(meta_ptrs, rank_data, rank, full_nvlink):
    c = _Comm()
    c.world, c.full_nvlink = len(meta_ptrs), full_nvlink
    c.upstream = os.environ.get("SGLANG_CUSTOM_ALLREDUCE_ALGO", "")
    one = os.environ.get("SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES", "")
    if one and not one.isdigit():
        raise ValueError("SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=%r: expected a whole number of bytes" % one)
    c.schedule = None
    if not os.environ.get("FAKE_EXT_OLD") and not full_nvlink:
        c.schedule = _schedule(os.environ.get("SGLANG_PCIE_CUSTOM_AR_ALGO", ""))
        if c.schedule is not None and one:
            raise ValueError("SGLANG_PCIE_CUSTOM_AR_ALGO and SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES are both set")
        isl = os.environ.get("SGLANG_PCIE_CUSTOM_AR_ISLANDS", "")
        if isl:
            ranks = sorted(int(r) for part in isl.split("/") for r in part.split(","))
            sizes = {len(part.split(",")) for part in isl.split("/")}
            if ranks != list(range(c.world)) or len(sizes) != 1:
                raise ValueError("SGLANG_PCIE_CUSTOM_AR_ISLANDS=%r: not a partition of the ranks into equal islands" % isl)
    return c


def register_buffer(fa, ptrs):
    pass


def _algo(fa, nbytes):
    if fa.upstream:
        return {"1stage": "pull1", "2stage": "pull2"}[fa.upstream]
    if fa.schedule:
        for algo, bound in fa.schedule:
            if bound is None or nbytes <= bound:
                return algo
    return "pull1" if fa.world == 2 else "push2"


def all_reduce(fa, inp, out, reg, reg_size):
    def op():
        if os.environ.get("FAKE_EXT_WRONG") == _algo(fa, inp.numel() * inp.element_size()):
            return
        t = inp.to(torch.float32).clone()
        dist.all_reduce(t)
        out.copy_(t.to(out.dtype))
    if sitecustomize.CAPTURING:
        sitecustomize.CAPTURING[-1].ops.append(op)
    else:
        op()


def dispose(fa):
    pass


def get_graph_buffer_ipc_meta(fa):
    return b"handle", [0]


def register_graph_buffers(fa, handles, offsets):
    pass
