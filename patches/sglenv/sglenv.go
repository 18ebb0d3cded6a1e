// Package sglenv names the environment variables that decide SGLang's
// custom allreduce: the pcie series' own (read by its 0002 gate patch and
// its 0001 dispatch, see patches/sglang/pcie-*/) and upstream's forced
// algorithm. Every package that sets, clears, records or drives one takes
// its name from here, and the Python texts arpatch runs (seriessim, the
// gate judge) are given the names from here too.
package sglenv

// The variables; values are strings, as the environment holds them.
const (
	// Force opens the Python gate on PCIe ("1").
	Force = "SGLANG_FORCE_CUSTOM_AR_PCIE"
	// MaxBytes caps the custom allreduce on PCIe (bytes; 0: NCCL always).
	MaxBytes = "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES"
	// OneStageMax is the legacy cut between pull1 and pull2 (bytes).
	OneStageMax = "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES"
	// Schedule is the PCIe kernel schedule (push1:B,island:B,push2, ...).
	Schedule = "SGLANG_PCIE_CUSTOM_AR_ALGO"
	// Islands names the P2P islands of the ranks ("0,1,2,3/4,5,6,7").
	Islands = "SGLANG_PCIE_CUSTOM_AR_ISLANDS"
	// Algo is upstream's forced algorithm ("1stage", "2stage").
	// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (CustomAllreduce::allreduce)
	Algo = "SGLANG_CUSTOM_ALLREDUCE_ALGO"
)

// Series lists the pcie series' own variables, in a fixed order: a
// process that runs a series with a clean slate unsets each of them.
var Series = []string{Force, MaxBytes, Schedule, Islands, OneStageMax}
