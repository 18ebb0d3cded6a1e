package gaterule

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/internal/textfmt"
)

// cxxJudge is one dispatch header, compiled for judging (bin), or why it
// could not be (buildErr: no clang++, or a *CompileError).
type cxxJudge struct {
	header   string
	src      cxxSource
	bin      string
	buildErr error
	variant  string     // where the tree preprocesses otherwise under a build variant (variants.go), or ""
	blind    *blindFile // a file of the series the judge cannot follow (blindChanged)
	names    []string
}

// prepareCxx gathers and compiles header. Problems that refuse the tree
// only where the gates admit custom allreduce are kept for check; it
// returns an error only when the tree cannot be read.
func prepareCxx(ctx context.Context, in Input, header string, rep *Report) (*cxxJudge, error) {
	src, err := gather(in.Read, header, projectDirs(header))
	if err != nil {
		return nil, err
	}
	cx := &cxxJudge{header: header, src: src, blind: blindChanged(in, header, src.Files)}
	cx.bin, cx.buildErr = buildJudge(ctx, src)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if cx.bin != "" {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(cx.bin), variantsFile))
		if err != nil {
			return nil, err
		}
		cx.variant = string(b)
	}
	return cx, nil
}

// probeNames runs the dispatch once per world size with nothing set and
// returns the variables it reads.
func (cx *cxxJudge) probeNames(ctx context.Context) ([]string, error) {
	if cx.bin == "" {
		return nil, nil
	}
	var scs []cxxScenario
	for _, ws := range WorldSizes {
		scs = append(scs, cxxScenario{WS: ws, Cap: defaultCap, Env: map[string]string{}, Calls: 1 << 2})
	}
	r, err := runJudge(ctx, cx.bin, []uint64{16, 4096, 65536, 1 << 20, 4 << 20, 8 << 20}, scs)
	if err != nil {
		return nil, err
	}
	cx.names = r.Getenv
	return r.Getenv, nil
}

// check runs the dispatch where reqs say the gates admit custom allreduce
// and returns the refusal of every call that does not launch exactly one
// kernel of a non-empty grid or throw.
func (cx *cxxJudge) check(ctx context.Context, reqs []requirement, rep *Report) error {
	switch {
	case errors.Is(cx.buildErr, ErrNoClang):
		rep.Notes = append(rep.Notes, fmt.Sprintf("%v; so %s was not compiled, and what it launches where the gates admit custom allreduce (%d places) was not checked", cx.buildErr, cx.header, len(reqs)))
		return nil
	case cx.buildErr != nil:
		return &DispatchError{Path: cx.header, Problem: cx.buildErr.Error(), Remedy: "the gate rule judges the dispatch by compiling it as the real build does (clang's CUDA host pass, the build's definitions, arpatch's stub CUDA headers); make it compile, or report a CUDA name the stubs lack"}
	case cx.blind != nil:
		return &DispatchError{Path: cx.blind.Path, Problem: cx.blind.Why,
			Remedy: "keep changes to the build, to the headers the judge restates and to the allreduce's binding out of a series that admits custom allreduce on PCIe, or put them in a series of their own"}
	case cx.variant != "":
		return &DispatchError{Path: cx.header, Problem: cx.variant + ": the judge compiles one build (clang's CUDA host pass, CUDA 12.8's macros, sgl-kernel's default definitions), so it would judge another dispatch than a real build compiles",
			Remedy: "make the dispatch and the files it includes the same program whatever the host compiler, the CUDA toolkit and sgl-kernel's build options: test a feature itself (__CUDA_ARCH__ in device code, __cplusplus), not the compiler, the toolkit's version or a build option"}
	}
	maxCap := uint64(defaultCap)
	for _, r := range reqs {
		maxCap = max(maxCap, r.Cap)
	}
	// Every constant the compiled dispatch compares with, as a size in
	// bytes, as a count of 2- and 4-byte elements, and of the 16-byte
	// packs upstream's allreduce divides its size into.
	// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (CustomAllreduce::allreduce: size /= d)
	cuts, err := judgeCuts(cx.bin)
	if err != nil {
		return err
	}
	extra := append(slices.Clone(probes), headerLiterals(cx.src)...)
	for _, n := range cuts {
		extra = append(extra, n, 2*n, 4*n, 16*n)
	}
	sizes := judgeSizes(maxCap, extra)
	results, err := cx.runAll(ctx, reqs, sizes)
	if err != nil {
		return err
	}
	var problems []string
	for _, r := range reqs {
		problems = append(problems, cx.misses(r, results)...)
	}
	for _, res := range results {
		rep.Constructions++
		rep.Calls += len(res.Runs) * len(sizes)
	}
	if len(problems) > 0 {
		return &DispatchError{Path: cx.header, Problem: "CustomAllreduce::allreduce, compiled as the build compiles it, " + summarize(problems, 3),
			Remedy: "every call the Python gates admit must launch exactly one kernel of a non-empty grid, or throw, and a kernel arpatch knows must get the call's type, world size, buffers, rank and size: give those PCIe-only calls a kernel at every size, or keep the gates closed there"}
	}
	if err := cx.prove(reqs, results); err != nil {
		return err
	}
	if unknown := cx.unknownKernels(reqs, results); len(unknown) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s launches %s where the gates admit custom allreduce; arpatch knows %s neither from upstream (cross_device_reduce_1stage and _2stage) nor from the pcie series (pcie_push_*), so what it computes was not checked",
			cx.header, strings.Join(unknown, ", "), textfmt.Word(len(unknown), "it", "them")))
	}
	return cx.checkPush(ctx, cx.pushRuns(reqs, results), rep)
}

// knownKernel matches the kernels arpatch knows (cxx/judge.cu, families).
var knownKernel = regexp.MustCompile(`^sglang::(cross_device_reduce_1stage|cross_device_reduce_2stage|pcie_push_1shot|pcie_push_2shot|pcie_push_island)<`)

// unknownKernels are the kernels, other than those arpatch knows, that the
// dispatch launches where the gates admit a call.
func (cx *cxxJudge) unknownKernels(reqs []requirement, results map[string]cxxResult) []string {
	var out []string
	for _, r := range reqs {
		res := results[scenarioKey(scenarioOf(r, 0, cx.names))]
		for _, runs := range res.Runs {
			for _, run := range runs {
				if run.Kind == "one" && run.From <= r.UpTo && !knownKernel.MatchString(run.Kernel) && !slices.Contains(out, run.Kernel) {
					out = append(out, run.Kernel)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// scenarioOf is the construction requirement r needs for rank, with the
// environment cut to the variables the dispatch reads (names).
func scenarioOf(r requirement, rank int, names []string) cxxScenario {
	env := map[string]string{}
	for k, v := range r.KernelEnv {
		if slices.Contains(names, k) {
			env[k] = v
		}
	}
	calls := uint(0) // all six
	if rank != 0 {
		calls = 1<<2 | 1<<5 // eager and graph bfloat16
	} else if !r.AllRanks {
		calls = 1<<2 | 1<<3 // eager bfloat16, graph float32
	}
	return cxxScenario{WS: r.WS, Rank: rank, NVL: r.NVL, Cap: r.Cap, Env: env, Calls: calls}
}

func scenarioKey(s cxxScenario) string {
	return fmt.Sprintf("%d/%d/%v/%d/%d/%v", s.WS, s.Rank, s.NVL, s.Cap, s.Calls, envText(s.Env))
}

func ranksOf(r requirement) []int {
	if !r.AllRanks {
		return []int{0}
	}
	out := make([]int, r.WS)
	for i := range out {
		out[i] = i
	}
	return out
}

// runAll runs every construction reqs need, each once, until the
// variables the dispatch reads are all known (a value may open a path
// that reads another), and returns the results by scenarioKey.
func (cx *cxxJudge) runAll(ctx context.Context, reqs []requirement, sizes []uint64) (map[string]cxxResult, error) {
	names := slices.Clone(cx.names)
	for round := 0; ; round++ {
		var scs []cxxScenario
		seen := map[string]bool{}
		for _, r := range reqs {
			for _, rank := range ranksOf(r) {
				s := scenarioOf(r, rank, names)
				if k := scenarioKey(s); !seen[k] {
					seen[k] = true
					scs = append(scs, s)
				}
			}
		}
		rep, err := runJudge(ctx, cx.bin, sizes, scs)
		if err != nil {
			return nil, err
		}
		if rep.Stopped != "" {
			return nil, &DispatchError{Path: cx.header, Problem: fmt.Sprintf("CustomAllreduce, compiled as the build compiles it, stopped the judge (%s) in %s", rep.Stopped, rep.At),
				Remedy: "host code must not dereference device memory, loop forever or abort where the gates admit custom allreduce"}
		}
		grown := union(slices.Clone(names), rep.Getenv)
		if len(grown) == len(names) || round == 2 {
			out := map[string]cxxResult{}
			for _, res := range rep.Results {
				out[scenarioKey(res.Scenario)] = res
			}
			cx.names = names
			return out, nil
		}
		names = grown
	}
}

// misses is what the dispatch does wrong where r says the gates admit
// custom allreduce, one line per rank, call and run of sizes.
func (cx *cxxJudge) misses(r requirement, results map[string]cxxResult) []string {
	var out []string
	for _, rank := range ranksOf(r) {
		res, ok := results[scenarioKey(scenarioOf(r, rank, cx.names))]
		if !ok || res.Init != "" {
			continue // the constructor throws: init_custom_ar raises, custom allreduce stays off
		}
		for _, call := range callBits {
			for _, run := range res.Runs[call] {
				from, to := run.From, min(run.To, r.UpTo)
				if from > to || run.Kind == "one" || run.Kind == "throw" {
					continue
				}
				out = append(out, fmt.Sprintf("at %s (rank %d%s; %s up to %d bytes), %s allreduce of %s %s",
					r.where(), rank, nvlText(r.NVL), r.Why, r.UpTo, call, bytesRange(from, to), runText(run)))
			}
		}
	}
	return out
}

func nvlText(nvl bool) string {
	if nvl {
		return ", handed full_nvlink=true"
	}
	return ", without full NVLink"
}

func bytesRange(from, to uint64) string {
	if from == to {
		return fmt.Sprintf("%d bytes", from)
	}
	return fmt.Sprintf("%d-%d bytes", from, to)
}

func runText(run cxxRunOf) string {
	switch run.Kind {
	case "none":
		return "launches no kernel"
	case "many":
		return fmt.Sprintf("launches %d kernels (%s, then %s)", run.N, run.Kernel, run.Second)
	case "wrong":
		return fmt.Sprintf("launches %s %s", run.Kernel, run.What)
	case "empty":
		return fmt.Sprintf("launches %s with grid (%d,%d,%d) and block (%d,%d,%d), which runs nothing", run.Kernel,
			run.Grid[0], run.Grid[1], run.Grid[2], run.Block[0], run.Block[1], run.Block[2])
	}
	return strings.TrimSpace(run.Kind + " " + run.What)
}

// prove runs the path proof (irproof.go) at every construction reqs made:
// with world_size_ and full_nvlink_ as its constructor set them, every
// path of allreduce<T> to a return must pass a launch, whatever else the
// code tests (the size, a counter, the pointers, the environment).
func (cx *cxxJudge) prove(reqs []requirement, results map[string]cxxResult) error {
	m, err := judgeIR(cx.bin)
	if err != nil {
		return err
	}
	if fn, at, how := m.fieldWrite(treeRel); fn != "" {
		return &DispatchError{Path: cx.header, Problem: fmt.Sprintf("%s (%s) %s; the gate judge takes both members as the constructor left them", demangled(fn), orUnknown(at), how),
			Remedy: "set world_size_ and full_nvlink_ in the constructor only, and read them elsewhere"}
	}
	if fn, c, at := m.deviceWrite(treeRel); fn != "" {
		return &DispatchError{Path: cx.header, Problem: fmt.Sprintf("%s (%s), which CustomAllreduce::allreduce runs, calls %s: it writes device memory besides the kernel, and may overwrite the sum the kernel writes", demangled(fn), orUnknown(at), c),
			Remedy: "let the kernel write the output, and keep copies and memsets out of the dispatch (register_buffer and the constructor may make them)"}
	}
	done := map[[2]int]bool{}
	var problems []string
	for _, r := range reqs {
		for _, rank := range ranksOf(r) {
			res, ok := results[scenarioKey(scenarioOf(r, rank, cx.names))]
			if !ok || res.Init != "" {
				continue
			}
			pair := [2]int{res.WorldField, res.NVLinkField}
			if done[pair] {
				continue
			}
			done[pair] = true
			got, err := m.prove(pair[0], pair[1], treeRel)
			if err != nil {
				return err
			}
			// One problem a path: the element types whose path is the same
			// are named together.
			var order []string
			types := map[string][]string{}
			for _, e := range proofEntries {
				pr := got[e.DType]
				if !pr.Returns {
					continue
				}
				through := "no line of the tree on the way"
				if len(pr.At) > 0 {
					through = "the path through " + linesText(pr.At)
				}
				if _, ok := types[through]; !ok {
					order = append(order, through)
				}
				types[through] = append(types[through], e.DType)
			}
			for _, through := range order {
				problems = append(problems, fmt.Sprintf("at %s (rank %d%s; world_size_ %d, full_nvlink_ %d as constructed), allreduce<%s> can return without a launch or a throw at some size, whatever the sizes the judge called at: %s",
					r.where(), rank, nvlText(r.NVL), pair[0], pair[1], strings.Join(types[through], ", "), through))
			}
		}
	}
	if len(problems) > 0 {
		return &DispatchError{Path: cx.header, Problem: "CustomAllreduce::allreduce, compiled as the build compiles it, " + summarize(problems, 3),
			Remedy: "every path of the dispatch where the Python gates admit a call must launch a kernel or throw, whatever the size, the pointers, a counter or the environment say: make the paths that skip the launch throw instead, or keep the gates closed there"}
	}
	return nil
}

func orUnknown(at string) string {
	if at == "" {
		return "line unknown"
	}
	return at
}

// linesText writes file:line locations with each file named once in a
// run: "a.cuh:48, 54, 84 and b.h:3".
func linesText(at []string) string {
	var b strings.Builder
	file := ""
	for i, l := range at {
		f, line, ok := strings.Cut(l, ":")
		switch {
		case i == 0:
		case i == len(at)-1:
			b.WriteString(" and ")
		default:
			b.WriteString(", ")
		}
		if ok && f == file {
			b.WriteString(line)
		} else {
			b.WriteString(l)
		}
		file = f
	}
	return b.String()
}
