package allreduce

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// NCCLVariant is one arm of NCCL under its documented knobs: NCCL run
// with Env on top of the environment (less any other knob of
// NCCLKnobs), at the sizes between MinBytes and MaxBytes. NCCL reads most
// knobs once per process (NCCL_PARAM caches them; NCCL_P2P_LEVEL is read
// once), so each variant is a torchrun of its own, with a communicator
// made under its variables.
//
// Upstream: NVIDIA/nccl src/graph/tuning.cc (NCCL_PROTO, NCCL_ALGO),
// src/init.cc (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, NCCL_BUFFSIZE),
// src/graph/paths.cc (NCCL_P2P_LEVEL); the knobs are documented in NCCL's
// "Environment Variables" page.
type NCCLVariant struct {
	Name string   `json:"name"` // "LL": the result's Variant, the column nccl:LL
	Env  []string `json:"env"`  // "NCCL_PROTO=LL"
	// MinBytes and MaxBytes bound the sizes it runs at, in bytes (0: no
	// bound): the set stays small by running each knob where it can win.
	MinBytes int `json:"min_bytes,omitempty"`
	MaxBytes int `json:"max_bytes,omitempty"`
	// WhenNoP2P runs it only when NCCL as the environment leaves it used
	// SHM or NET between the GPUs (otherwise it is that run again).
	WhenNoP2P bool `json:"when_no_p2p,omitempty"`
	// NVLinkOnly: NCCL itself enables it only where every rank reaches
	// the others by NVLink; forced elsewhere its data may be corrupt
	// without a wrong sum in a test, so a tune never chooses it there
	// (it is measured and shown all the same).
	NVLinkOnly bool   `json:"nvlink_only,omitempty"`
	Why        string `json:"why"`
}

// NCCLKnobs are the variables NCCL variants set. A tune file may carry
// the winning one (harness/tune); a variant's run clears the others.
var NCCLKnobs = []string{"NCCL_PROTO", "NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_P2P_LEVEL", "NCCL_BUFFSIZE"}

// NCCLVariants is the built-in set, each knob at the sizes where it can
// beat NCCL's own choice.
var NCCLVariants = []NCCLVariant{
	{Name: "LL", Env: []string{"NCCL_PROTO=LL"}, MaxBytes: 512 << 10,
		Why: "the low-latency protocol (8-byte stores of data and flag): the fastest for small allreduces, half the bandwidth for large ones"},
	// Upstream: NVIDIA/nccl src/graph/tuning.cc@b6475625fbca (ncclTopoTuneModel):
	// with NCCL_PROTO unset, LL128 is enabled only where the ranks'
	// intra-node path is NVLink (typeIntra <= PATH_NVB), on one compute
	// capability NCCL has tested ("Other cases are not tested and may
	// cause silent data corruption"); NCCL_PROTO=LL128 set by hand skips
	// that rule. LL128 relies on a 128-byte store reaching the peer in
	// ascending address order (NVIDIA/nccl#786, a maintainer's answer).
	{Name: "LL128", Env: []string{"NCCL_PROTO=LL128"}, NVLinkOnly: true,
		Why: "128-byte lines with a flag: NCCL enables it only over NVLink, where a 128-byte store arrives in order; off NVLink it is measured, its sums checked, and never chosen"},
	{Name: "Simple", Env: []string{"NCCL_PROTO=Simple"}, MinBytes: 64 << 10,
		Why: "bulk copies with a fence per chunk: the bandwidth protocol"},
	{Name: "Ring", Env: []string{"NCCL_ALGO=Ring"},
		Why: "the ring: 2(N-1) steps, each rank's link busy all the time"},
	{Name: "Tree", Env: []string{"NCCL_ALGO=Tree"},
		Why: "the tree (a chain inside one host): NCCL's other allreduce algorithm"},
	{Name: "ch2", Env: []string{"NCCL_MAX_NCHANNELS=2"}, MaxBytes: 256 << 10,
		Why: "at most 2 channels: fewer blocks to synchronize on a small allreduce"},
	{Name: "ch16", Env: []string{"NCCL_MIN_NCHANNELS=16"}, MinBytes: 256 << 10,
		Why: "at least 16 channels: more concurrent copies where NCCL builds few over PCIe"},
	{Name: "buff1M", Env: []string{"NCCL_BUFFSIZE=1048576"}, MinBytes: 256 << 10,
		Why: "a quarter of NCCL's default 4 MiB buffer per channel and peer: what people set when NCCL's buffers do not fit beside the KV cache"},
	{Name: "P2P-SYS", Env: []string{"NCCL_P2P_LEVEL=SYS"}, WhenNoP2P: true,
		Why: "P2P between every pair, across CPU sockets too: NCCL uses SHM by policy above its P2P level even where P2P works"},
}

// VariantNames are the names --nccl-variants takes: every variant, "all"
// and "none".
func VariantNames() []string {
	names := []string{"all", "none"}
	for _, v := range NCCLVariants {
		names = append(names, v.Name)
	}
	return names
}

// ParseVariants reads --nccl-variants' list: "all" (the built-in set),
// "none", or variant names. It refuses an unknown name, naming it and the
// known ones.
func ParseVariants(names []string) ([]NCCLVariant, error) {
	var out []NCCLVariant
	for _, n := range names {
		switch n {
		case "none":
			continue
		case "all":
			for _, v := range NCCLVariants {
				if !slices.ContainsFunc(out, func(x NCCLVariant) bool { return x.Name == v.Name }) {
					out = append(out, v)
				}
			}
			continue
		}
		i := slices.IndexFunc(NCCLVariants, func(v NCCLVariant) bool { return v.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("%q: use %s", n, strings.Join(VariantNames(), ", "))
		}
		if !slices.ContainsFunc(out, func(x NCCLVariant) bool { return x.Name == n }) {
			out = append(out, NCCLVariants[i])
		}
	}
	return out, nil
}

// IsBaseline reports whether NCCL run as variant (a result's Variant: ""
// for NCCL as the environment leaves it, "LL", "LL128", ...) may be the
// baseline every speed-up compares with, on ranks joined all by NVLink
// (nvlink) or not: the fastest correct variant the host can use, so never
// a NVLinkOnly variant (LL128) off NVLink, where NCCL itself would not
// enable it and its data may be corrupt without a wrong sum in a test.
// It is the one rule for bench allreduce's table, costs, findings and
// JSON, and tune's pick (harness/tune.Pick).
func IsBaseline(variant string, nvlink bool) bool {
	v, ok := LookupVariant(variant)
	return nvlink || !ok || !v.NVLinkOnly
}

// LookupVariant returns the built-in variant named name.
func LookupVariant(name string) (NCCLVariant, bool) {
	i := slices.IndexFunc(NCCLVariants, func(v NCCLVariant) bool { return v.Name == name })
	if i < 0 {
		return NCCLVariant{}, false
	}
	return NCCLVariants[i], true
}

// Sizes are the sizes of sizes the variant runs at.
func (v NCCLVariant) Sizes(sizes []int) []int {
	var out []int
	for _, n := range sizes {
		if (v.MinBytes == 0 || n >= v.MinBytes) && (v.MaxBytes == 0 || n <= v.MaxBytes) {
			out = append(out, n)
		}
	}
	return out
}

// VariantRun is one NCCL variant's run: NCCL alone, under the variant's
// variables, at its sizes, every sum checked, with NCCL's account of what
// it chose (Run.NCCL: Env, Chose).
type VariantRun struct {
	Variant NCCLVariant `json:"variant"`
	Sizes   []int       `json:"sizes"`
	Run     *Run        `json:"run"`
	// Missing are the cases that never reported (a rank that died).
	Missing []string `json:"missing,omitempty"`
}

// ExecuteVariants runs each of vs after main, the run of NCCL as the
// environment leaves it: one torchrun per variant, with opts' interpreter,
// world size, modes, counts, timeout and environment (less the other NCCL
// knobs) and NCCL_DEBUG=INFO, at the sizes of opts the variant takes.
// Nothing runs when main did not end ok (a hang there would be a hang per
// variant) or was oversubscribed (NCCL needs a GPU per rank);
// a WhenNoP2P variant runs only when main's NCCL used SHM or NET. skipped
// says, per variant not run, why. A run that fails, hangs or runs out of
// memory is its VariantRun's outcome, not an error; the error is one that
// started nothing. A ctx that ends stops after the variant in progress.
func ExecuteVariants(ctx context.Context, opts Options, main *Run, vs []NCCLVariant) (runs []*VariantRun, skipped []string, err error) {
	for _, v := range vs {
		if ctx.Err() != nil {
			break
		}
		sizes := v.Sizes(opts.Sizes)
		switch {
		case main != nil && main.Exit != "ok":
			skipped = append(skipped, fmt.Sprintf("nccl:%s: not run: the run before it ended %s", v.Name, main.Exit))
			continue
		case main != nil && main.Env.Oversubscribed:
			skipped = append(skipped, fmt.Sprintf("nccl:%s: not run: %d ranks on %d GPUs, and NCCL needs a GPU per rank", v.Name, main.Env.WorldSize, main.Env.Devices))
			continue
		case len(sizes) == 0:
			skipped = append(skipped, fmt.Sprintf("nccl:%s: not run: none of the sizes is in its range", v.Name))
			continue
		case v.WhenNoP2P && (main == nil || main.NCCL.Transports["SHM"]+main.NCCL.Transports["NET"] == 0):
			skipped = append(skipped, fmt.Sprintf("nccl:%s: not run: NCCL as the environment leaves it did not use SHM or NET between the GPUs", v.Name))
			continue
		}
		o := opts
		o.Impls, o.Sizes, o.Cap, o.Layouts, o.Ext, o.ProbeThresholds = []string{NCCL}, sizes, false, nil, "", false
		o.Branches = []string{"pcie"} // NCCL has none; bench.py wants the flag
		o.NCCLDebug = true
		o.Env = append(withoutKnobs(opts.Env), v.Env...)
		if o.Log != nil {
			// A log's later runs are the variants': what NCCL logs there
			// is not what the environment left it (MainRun).
			fmt.Fprintf(o.Log, "%snccl:%s: %s\n", VariantLogPrefix, v.Name, strings.Join(v.Env, " "))
		}
		r, err := Execute(ctx, o)
		if err != nil {
			return runs, skipped, err
		}
		for i := range r.Results {
			r.Results[i].Variant = v.Name
		}
		if r.Hang != nil {
			r.Hang.Variant = v.Name
		}
		if r.Interrupted != nil {
			r.Interrupted.Variant = v.Name
		}
		runs = append(runs, &VariantRun{Variant: v, Sizes: sizes, Run: r, Missing: MissingCases(o, r.Results)})
	}
	return runs, skipped, nil
}

// VariantLogPrefix starts the line Options.Log gets before each variant's
// run: "arpatch: nccl:P2P-SYS: NCCL_P2P_LEVEL=SYS".
const VariantLogPrefix = "arpatch: "

// MainRun is the part of a bench allreduce log (--log) before its first
// NCCL variant: the run of NCCL as the environment left it.
func MainRun(lines []string) []string {
	for i, l := range lines {
		if strings.HasPrefix(l, VariantLogPrefix+"nccl:") {
			return lines[:i]
		}
	}
	return lines
}

// withoutKnobs is env (nil: the process environment) less NCCLKnobs.
func withoutKnobs(env []string) []string {
	if env == nil {
		env = environ()
	}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(NCCLKnobs, k) {
			out = append(out, kv)
		}
	}
	return out
}

// VariantName is the name of an NCCL result as tables and tunes print
// it: "nccl" for NCCL as the environment leaves it, "nccl:LL" for a
// variant.
func VariantName(variant string) string {
	if variant == "" {
		return NCCL
	}
	return NCCL + ":" + variant
}
