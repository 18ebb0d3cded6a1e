// Package doctor inspects a GPU host before a long tuning run: GPUs and
// their PCIe links, the NVLink/PCIe topology and NUMA split, P2P support,
// IOMMU hints, the CUDA toolchain and torch, the archs compiled into the
// installed sgl-kernel, and environment settings known to hurt custom
// allreduce or EAGLE-3. Each finding has a severity and a remedy.
//
// It judges what the job uses, not the whole host: the GPUs
// CUDA_VISIBLE_DEVICES leaves visible (torch's rules) and the TP group on
// them, the server's flags as SGLang's argparse reads them (ServerOptions,
// from a tree's server_args.py or a built-in table), and the server's
// environment. A value nvidia-smi cannot read is unknown: it is reported
// (Judged.Unreadable) and draws no finding.
//
// It reads nvidia-smi's output with harness/nvsmi, and `cuobjdump
// --list-elf` with ParseListELF; both are tested on recorded outputs.
package doctor
