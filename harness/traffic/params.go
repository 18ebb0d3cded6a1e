package traffic

import (
	"math"
	"strings"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// Params are the model's constants. Each field says where its value in
// Default comes from, in one word its doc starts a sentence with:
// Measured here (arpatch's own runs), Published (someone else's
// measurement or specification, cited), Fitted (solved from measurements,
// named, so that the model reproduces them), Assumed (held without a
// measurement of its own; docs/pcie-dispatch.md says what would change if
// it were wrong) or Upstream (a value of upstream's code, cited).
// TestConstantsLabelled holds each field to one label and to its row in
// docs/pcie-dispatch.md. A
// measurement file (issue 25's host qualification) replaces them field by
// field: the JSON names are the field tags, and Source says which set the
// model used.
type Params struct {
	// Source names the set: "calibrated" for Default (the published
	// figures and arpatch's H200 fixtures), or what a measurement file
	// says it is ("measured: FILE, DATE").
	Source string `json:"source"`

	// PCIeEfficiency scales a link's nominal bandwidth to what a P2P copy
	// reaches: 54 of Gen5 x16's 63 GB/s. Published: FlashInfer's single
	// hop at Gen5, 53.2-55.0 GB/s (flashinfer-ai/flashinfer#4870, the SOL
	// table); P2P writes between Gen5 GPUs ~53-56 GB/s
	// (local-inference-lab/rtx6kpro hardware/pcie-bandwidth.md).
	PCIeEfficiency float64 `json:"pcie_efficiency"`
	// NVLinkGBps is one NVLink's bandwidth per direction: 25 GB/s.
	// Published: NVIDIA's NVLink 4 figure for H100 and H200, 900 GB/s over
	// 18 links counting both directions. Only NVLink pairs use it.
	NVLinkGBps float64 `json:"nvlink_gbps"`
	// KernelStoreEfficiency is the share of a copy engine's P2P rate that
	// stores issued by a kernel reach over PCIe: 1/1.24. Published:
	// "copy-engine transfers are only ~24% faster than kernel writes here"
	// on 8x SM120 across two NUMA nodes (flashinfer-ai/flashinfer#4393).
	// Every copy-engine rate below (links, uplinks, root complexes, the
	// inter-socket link) is charged at this share for custom kernels and
	// NCCL alike, both of which move data with SM loads and stores.
	KernelStoreEfficiency float64 `json:"kernel_store_efficiency"`
	// RootComplexWriteGBps is what one socket's root complex forwards
	// between its root ports, counted at the receiving GPUs, for posted
	// writes: 129.7 GB/s. Published: p2pmark's all-to-all copy of 4 GPUs
	// on one NUMA node of a dual-Turin host without switches (129.7 of an
	// ideal 220.6 GB/s; rtx6kpro hardware/pcie-bandwidth.md, "Festr");
	// FlashInfer's staged ring inside one root complex of a Gen4 host ran
	// at 97% of a single hop (25.46 of 26.26 GB/s per GPU, 102 GB/s in
	// all; #4870), below this bound.
	RootComplexWriteGBps float64 `json:"root_complex_write_gbps"`
	// RootComplexReadGBps is the effective bandwidth, per socket, of P2P
	// reads that cross a CPU root complex (PHB, NODE, SYS), shared by all
	// such reads into the socket. Fitted (Calibrate): forced 1-stage at
	// 42 KB on the reference host must take Anchor1StageUS (391.7 µs), the
	// published account's 38 against 54 tok/s. It absorbs read-completion
	// credits, IOMMU translation and ordering; nobody measured it as a
	// bandwidth.
	RootComplexReadGBps float64 `json:"root_complex_read_gbps"`
	// InterSocketGBps is the inter-socket link's P2P rate per direction
	// for writes: 95 GB/s. Published: FlashInfer's "cross-boundary, all
	// flows" rate on an 8x sm_120 Gen5 host, 23.75 GB/s for each of the 4
	// flows of an island exchange (#4870, CX8); on a Gen4 host of two NUMA
	// islands without switches it was 9.70 GB/s per flow (CX7). One flow
	// alone is bounded by its GPU links: 50-51 GB/s cross-NUMA P2P writes
	// on dual Turin (rtx6kpro).
	InterSocketGBps float64 `json:"inter_socket_gbps"`

	// CustomFixedUS is a custom kernel's cost beside its barriers, read
	// rounds and bytes (launch in a CUDA graph, the local reduce): 0.7 µs.
	// Assumed: the joint fit of 1-stage and 2-stage on 2x H200 in CUDA
	// graphs (measured here, docs/allreduce-h200.md) fixes this plus two
	// barriers, 2.0 µs, but cannot tell the two apart; 0.7 is held, and
	// the barrier (NVLinkBarrierUS, and BarrierUS with it) is the rest.
	CustomFixedUS float64 `json:"custom_fixed_us"`
	// BarrierUS is one flag barrier over PCIe: each rank writes a flag into
	// each peer's Signal (a posted write, one way) and polls its own
	// memory. Assumed equal to NVLinkBarrierUS: a posted write between Gen5
	// GPUs takes 0.36-0.52 µs one way (rtx6kpro, p2pBandwidthLatencyTest),
	// the same order as the fitted NVLink barrier; no PCIe barrier was
	// measured. The same for every span: a write within a NUMA node took
	// 0.36-0.45 µs and across 0.44 µs on dual Turin (rtx6kpro).
	BarrierUS float64 `json:"barrier_us"`
	// ReadRound4US and ReadRound8US are one round of P2P reads under
	// all-to-all load over PCIe, every GPU reading from every peer at once:
	// 4.10 µs with 4 GPUs on one switch and 6.79 µs with 8 GPUs behind
	// three switches. Published: p2pmark's effective latency (rtx6kpro
	// hardware/pcie-bandwidth.md, "luke"; other 8-GPU hosts 6.03-7.40 µs).
	// Other world sizes are interpolated linearly (ReadRoundUS).
	ReadRound4US float64 `json:"read_round4_us"`
	ReadRound8US float64 `json:"read_round8_us"`
	// NVLinkBarrierUS and NVLinkReadUS are a flag barrier and a round of
	// P2P reads over NVLink. Fitted: 1-stage (CustomFixedUS + 2 barriers +
	// 1 read round, 4.6 µs) and 2-stage (2 barriers + 2 read rounds,
	// 7.2 µs) at 40 KiB in CUDA graphs on 2x H200 (docs/allreduce-h200.md).
	NVLinkBarrierUS float64 `json:"nvlink_barrier_us"`
	NVLinkReadUS    float64 `json:"nvlink_read_us"`

	// NCCLFixedUS and NCCLStepUS: NCCL's ring with the LL protocol (what
	// NCCL picks at these sizes) costs NCCLFixedUS + 2(N-1)·NCCLStepUS
	// beside its bytes. Fitted to NCCL in CUDA graphs on 2x and 4x H200
	// (8.6 µs, 2 steps; 14.8 µs, 6 steps); at N = 8 this gives ~27 µs, the
	// ~24-25 µs NCCL takes for ≤ 64 KB on 8x RTX PRO 6000 behind switches
	// (rtx6kpro). Other protocols and the tree scale these by NCCL's own
	// tuning tables (nccl.go).
	NCCLFixedUS float64 `json:"nccl_fixed_us"`
	NCCLStepUS  float64 `json:"nccl_step_us"`
	// NCCLSHMStepUS is a step when NCCL falls back to SHM through host
	// memory. Fitted: the published ~200 µs per 42 KB at N = 8.
	NCCLSHMStepUS float64 `json:"nccl_shm_step_us"`

	// ScratchBytes is the IPC scratch each rank's push kernels may use
	// (the region after its Signal block): 8 MiB, SGLang's default
	// max_size, which the series' kernel reads from the allocation.
	// Upstream: python/sglang/srt/distributed/device_communicators/custom_all_reduce.py@84118acf50b3 (CustomAllreduce.__init__).
	ScratchBytes int `json:"scratch_bytes"`
}

// Published anchors: the published account's figures for 8 PCIe GPUs
// serving with EAGLE-3 (NCCL ~200 µs per ~42 KB allreduce,
// allreduce.VerifyCount per verify pass; forced 1-stage 38 tok/s against
// NCCL's 54).
const (
	// AnchorBytes is the published account's allreduce size: ~42 KB.
	AnchorBytes = 42000
	// AnchorNCCLUS is NCCL's time per allreduce there.
	AnchorNCCLUS = 200.0
	// Anchor1StageUS is forced 1-stage's time per allreduce implied by
	// 38 tok/s against NCCL's 54 with allreduce.VerifyCount allreduces per
	// verify pass at accept length 3: (3/38 - 3/54) s / VerifyCount +
	// 200 µs.
	Anchor1StageUS = (3.0/38-3.0/54)/allreduce.VerifyCount*1e6 + AnchorNCCLUS
)

// Default returns the calibrated parameters (Source "calibrated").
func Default() Params {
	p := Params{
		Source:                "calibrated",
		PCIeEfficiency:        54.0 / (16 * 3.938),
		NVLinkGBps:            25,
		KernelStoreEfficiency: 1 / 1.24,
		RootComplexWriteGBps:  129.7,
		InterSocketGBps:       4 * 23.75,
		CustomFixedUS:         0.7,
		ReadRound4US:          4.10,
		ReadRound8US:          6.79,
		NCCLFixedUS:           5.5,
		NCCLStepUS:            1.55,
		ScratchBytes:          8 << 20,
	}
	// 2x H200, 40 KiB, CUDA graphs: 1-stage 4.6 µs = F + 2B + R, 2-stage
	// 7.2 µs = F + 2B + 2R.
	p.NVLinkReadUS = H200TwoStageUS - H200OneStageUS
	p.NVLinkBarrierUS = (H200OneStageUS - p.CustomFixedUS - p.NVLinkReadUS) / 2
	p.BarrierUS = p.NVLinkBarrierUS
	p.NCCLSHMStepUS = (AnchorNCCLUS - p.NCCLFixedUS) / 14
	p.RootComplexReadGBps = Calibrate(p)
	return p
}

// The H200 medians the NVLink constants are fitted to: custom allreduce at
// 40 KiB in CUDA graphs on 2x H200 through the PCIe branch
// (harness/allreduce/testdata/h200x2-ws2-report.json, rounded to 0.1 µs).
const (
	H200OneStageUS = 4.6
	H200TwoStageUS = 7.2
)

// ReadRoundUS is one round of P2P reads among n GPUs all reading at once
// over PCIe: ReadRound4US at 4, ReadRound8US at 8, linear in the number
// of peers each GPU reads from (2.75 µs at 2 with the defaults).
func (p Params) ReadRoundUS(n int) float64 {
	return p.ReadRound4US + (p.ReadRound8US-p.ReadRound4US)*float64(n-4)/4
}

// Calibrate returns the root-complex read bandwidth (GB/s) at which forced
// 1-stage at AnchorBytes on the reference host (RefHost) takes
// Anchor1StageUS, with p's other constants.
func Calibrate(p Params) float64 {
	t := RefHost(p)
	p.RootComplexReadGBps = 1 // GB/s: the resource time is then bytes/1e3 µs
	e := t.Estimate(Custom1Stage, AnchorBytes, p)
	var rc float64
	for _, r := range e.Resources {
		if strings.HasSuffix(r.Name, "root complex") || strings.HasPrefix(r.Name, "inter-socket link") {
			rc = math.Max(rc, r.Bytes)
		}
	}
	return rc / ((Anchor1StageUS - e.LatencyUS) * 1e3)
}
