# arpatch gate rule test fixture: an init-time gate in the shape of SGLang's
# custom_all_reduce_utils.py (written for these tests, not upstream's code).
import os

import pynvml
import torch
import torch.distributed as dist


def is_full_nvlink(ids):
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in ids]
    for i, a in enumerate(handles):
        for b in handles[i + 1:]:
            if pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK) != pynvml.NVML_P2P_STATUS_OK:
                return False
    return True


def can_use_custom_all_reduce_with_nvlink(group, device, supported_world_size, cls_name):
    world_size = dist.get_world_size(group=group)
    if world_size not in supported_world_size:
        return None
    mine = torch.tensor([device.index], dtype=torch.int)
    ids = [torch.tensor([0], dtype=torch.int) for _ in range(world_size)]
    dist.all_gather(ids, mine, group=group)
    full_nvlink = is_full_nvlink([int(t) for t in ids])
    if world_size > 2 and not full_nvlink:  # GATE1
        return None
    return full_nvlink
