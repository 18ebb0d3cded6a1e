// Package p2p measures a host's GPU-to-GPU paths the way custom allreduce
// uses them: through CUDA IPC mappings (cuIpcGetMemHandle and
// cuIpcOpenMemHandle on cuMemAlloc'd buffers, what cudaIpc* calls do),
// with kernels that load from and store to the mapped pointers. It starts
// p2p.py (embedded) on one rank per GPU with torchrun (internal/torchrun),
// reads rank 0's JSON lines and builds a Report: per ordered GPU pair, read
// and write bandwidth and latency (a flag ping-pong and a chain of
// dependent loads); each GPU's link to pinned host memory; and the
// all-to-all patterns the kernels make (Patterns: within each switch,
// within each socket, across sockets), reads as 1-stage pulls them and
// writes as a push would.
//
// Every byte that moves is checked against a seeded pattern (see p2p.py),
// so a fast path that drops or changes data is an error, never a figure:
// "P2P reports OK but corrupts data", and custom allreduce must not run
// there. A pair far below its link's nominal rate (Link: nvidia-smi's link
// class, PCIe generation and width, or its NVLink count) is named with the
// link. With one GPU there is no peer: the Report says what cannot be
// measured and measures the GPU's link to host memory.
//
// It is the measuring side of the traffic model (harness/traffic), whose
// constants a host's Report can replace; it judges no allreduce and runs
// no NCCL (harness/allreduce does). Its pure parts (Patterns, NewReport)
// are tested on recorded and stubbed records; p2p.py's orchestration and
// checks run in tests on its stub device (--stub-world-size).
package p2p
