# arpatch gate rule test fixture: a per-call gate in the shape of SGLang's
# custom_all_reduce.py (written for these tests, not upstream's code).
import torch
import torch.distributed as dist

import sgl_kernel.allreduce as ops
from sglang.srt.distributed.device_communicators.custom_all_reduce_utils import (
    can_use_custom_all_reduce_with_nvlink,
)


class CustomAllreduce:
    _SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]

    def __init__(self, group, device, max_size=8192 * 1024):
        self.disabled = True
        rank = dist.get_rank(group=group)
        self.world_size = dist.get_world_size(group=group)
        full_nvlink = can_use_custom_all_reduce_with_nvlink(group, device, self._SUPPORTED_WORLD_SIZES, "CustomAllreduce")
        if full_nvlink is None:
            return
        self.max_size, self.full_nvlink = max_size, full_nvlink
        self._ptr = ops.init_custom_ar([0] * self.world_size, torch.empty(max_size, dtype=torch.uint8), rank, full_nvlink)
        self.disabled = False

    def should_custom_ar(self, inp):
        if self.disabled:
            return False
        n = inp.numel() * inp.element_size()
        if n % 16 != 0:
            return False
        if self.world_size == 2 or self.full_nvlink:  # GATE2
            return n <= self.max_size
        return False

    def custom_all_reduce(self, inp):
        if self.disabled or not self.should_custom_ar(inp):
            return None
        out = torch.empty_like(inp)
        ops.all_reduce(self._ptr, inp, out, 0, 0)
        return out
