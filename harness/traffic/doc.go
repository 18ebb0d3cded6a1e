// Package traffic is a PCIe traffic model of allreduce on one host. For
// each algorithm (the pcie series' pull1/pull2, i.e. upstream's custom
// 1-stage and 2-stage, its push1, push2 and island pushes, and NCCL's ring
// and tree under its LL, LL128 and Simple protocols) it lays out the
// transfers between ranks step by step, which are posted writes and which
// reads, the flag barriers and the ranks each waits for (every rank, an
// island, or the partners across islands), and puts each step's bytes
// through the host's shared parts: each GPU's link in and out, each PCIe
// switch's uplink, each socket's root complex and the inter-socket link,
// from the host's topology (`nvidia-smi topo -m` PIX/PXB/PHB/NODE/SYS/NV#
// and each GPU's link generation and width). The result is an estimated
// latency in µs, the schedule the pcie series' SGLANG_PCIE_CUSTOM_AR_ALGO
// would run (Suggest) and its cut with NCCL.
//
// It is an estimate, not a measurement. Its case for pushes rests on P2P
// reads across a root complex under all-to-all load being slow (fitted to
// the published account's 38 against 54 tok/s) while posted writes run at
// copy-engine rates (published p2pmark and FlashInfer figures); no PCIe
// multi-GPU host available to this project has confirmed that asymmetry.
// It cannot see NCCL's transport choice (it gives P2P and, apart, the SHM
// figure the published account implies), switch arbitration, IOMMU
// translation, clocks or kernel launch gaps. Params says where each
// constant comes from; docs/pcie-dispatch.md gives the arithmetic, the
// tables the tests assert and what would change the choice if a constant
// were wrong. `arpatch tune allreduce` measures what the model estimates.
//
// The algorithms are the pcie series' (docs/pcie-dispatch.md, "The
// algorithms"); upstream's are cited where they are defined (model.go).
package traffic
