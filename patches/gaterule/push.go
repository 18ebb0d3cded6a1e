package gaterule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/patches/kernelsim"
	"github.com/arpatch/arpatch/patches/sglenv"
)

// The pcie series' push kernels are the series' own code, and a launch of
// one says nothing of what it computes. Where the dispatch launches one
// for a call the gates admit, the judge runs it on the CPU (package
// kernelsim: every CUDA thread a host thread, every rank a set of
// blocks) at sizes from the range it is launched for, on every rank, and
// requires the exact sum of every rank's input on every rank. Upstream's
// pull kernels use inline PTX and are not run here.

// pushKernel matches a launched push kernel's name (cxx/judge.cu,
// kernel_name): its algorithm, element type and world size.
var pushKernel = regexp.MustCompile(`^sglang::pcie_push_(1shot|2shot|island)<(float|__half|__nv_bfloat16), ([0-9])>$`)

var pushAlgo = map[string]string{"1shot": "push1", "2shot": "push2", "island": "island"}
var pushDType = map[string]string{"float": "float32", "__half": "float16", "__nv_bfloat16": "bfloat16"}

// maxPushBytes is the largest size the push kernels are run at: the
// emulation allocates every rank's input, output and scratch.
const maxPushBytes = 256 << 10

// pushRun is one push kernel at one world size and islands layout, with
// the sizes (packed elements) it is run at and where it was launched.
type pushRun struct {
	kernel   string
	c        kernelsim.Case
	where    string            // the first place the dispatch launches it
	env      map[string]string // the environment of that place
	packs    map[int]bool
	from, to uint64
}

// pushEdges are the packed-element counts tried inside each range of
// sizes a kernel is launched for: block and warp boundaries.
var pushEdges = []int{1, 2, 3, 7, 8, 9, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 4095, 4096, 4097, 16383, 16384}

// pushRuns collects, from the results of reqs, every push kernel the
// dispatch launches where the gates admit a call, with the sizes to run.
func (cx *cxxJudge) pushRuns(reqs []requirement, results map[string]cxxResult) []*pushRun {
	runs := map[string]*pushRun{}
	var order []string
	for _, r := range reqs {
		res, ok := results[scenarioKey(scenarioOf(r, 0, cx.names))]
		if !ok || res.Init != "" {
			continue
		}
		for _, call := range callBits {
			for _, run := range res.Runs[call] {
				m := pushKernel.FindStringSubmatch(run.Kernel)
				from, to := run.From, min(run.To, r.UpTo, maxPushBytes)
				if run.Kind != "one" || m == nil || from > to {
					continue
				}
				islands := r.KernelEnv[sglenv.Islands]
				key := run.Kernel + "/" + islands
				pr := runs[key]
				if pr == nil {
					ws, _ := strconv.Atoi(m[3])
					pr = &pushRun{kernel: run.Kernel, packs: map[int]bool{}, from: from, to: to,
						c:     kernelsim.Case{DType: pushDType[m[2]], WS: ws, Algo: pushAlgo[m[1]], Islands: islands, Threads: 8, Seed: 1, Timeout: 30 * time.Second},
						where: fmt.Sprintf("at %s, %s allreduce of %s", r.where(), call, bytesRange(from, to)), env: r.KernelEnv}
					runs[key] = pr
					order = append(order, key)
				}
				a, b := int(from/16), int(to/16)
				pr.packs[a], pr.packs[b], pr.packs[(a+b)/2] = true, true, true
				for _, e := range pushEdges {
					if e >= a && e <= b {
						pr.packs[e] = true
					}
				}
			}
		}
	}
	var out []*pushRun
	for _, k := range order {
		pr := runs[k]
		for p := range pr.packs {
			pr.c.Packs = append(pr.c.Packs, p)
		}
		sort.Ints(pr.c.Packs)
		pr.c.Calls = len(pr.c.Packs)
		out = append(out, pr)
	}
	return out
}

// deviceArchs are the archs whose device pass the push kernels are run
// as: every arch arpatch builds (package cudaarch) from compute
// capability 8.0, below which upstream's header has no bf16 arithmetic
// (its `__CUDA_ARCH__ >= 800` guard) and sgl-kernel is not built.
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (upcast_s, downcast_s for nv_bfloat16).
func deviceArchs() []cudaarch.Arch {
	var out []cudaarch.Arch
	for _, a := range cudaarch.Known() {
		if cc, err := strconv.Atoi(a.CC()); err == nil && cc >= 80 {
			out = append(out, a)
		}
	}
	return out
}

// parseCap is the scratch the host and device builds are constructed
// with when their reading of the islands is compared: two of the Python
// side's 8 MiB buffers.
const parseCap = 16 << 20

// devicePass is the archs whose device passes preprocess to one text, and
// their driver.
type devicePass struct {
	archs []cudaarch.Arch
	sim   *kernelsim.Sim
}

func (d devicePass) String() string {
	s := "the device pass for " + d.archs[0].SM()
	switch n := len(d.archs) - 1; {
	case n == 1:
		s += " (and " + d.archs[1].SM() + ", which preprocesses alike)"
	case n > 1:
		s += fmt.Sprintf(" (and %d more archs that preprocess alike)", n)
	}
	return s
}

// devicePasses builds the device pass of header for every arch of
// deviceArchs, in parallel, and groups the archs by the driver they give.
func devicePasses(ctx context.Context, dir, header string) ([]devicePass, error) {
	archs := deviceArchs()
	sims, errs := make([]*kernelsim.Sim, len(archs)), make([]error, len(archs))
	sem := make(chan struct{}, max(1, runtime.NumCPU()))
	var wg sync.WaitGroup
	for i, a := range archs {
		wg.Add(1)
		goroutine.Go(func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			sims[i], errs[i] = kernelsim.Build(ctx, dir, kernelsim.Source{Header: header, Arch: a})
		})
	}
	wg.Wait()
	var out []devicePass
	for i, a := range archs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		j := slices.IndexFunc(out, func(d devicePass) bool { return d.sim.ID() == sims[i].ID() })
		if j < 0 {
			out = append(out, devicePass{sim: sims[i]})
			j = len(out) - 1
		}
		out[j].archs = append(out[j].archs, a)
	}
	return out, nil
}

// checkPush runs the push kernels of runs and returns the refusal of one
// that leaves a wrong sum or hangs; without a host compiler it notes what
// was not run.
//
// A kernel runs on the GPU as nvcc's device pass compiles it, and its
// arguments come from CustomAllreduce's host pass. So the kernels are run
// as the device pass of every arch (kernelsim.Source.Arch: __CUDA_ARCH__
// and the arch's feature macros defined, upstream's PTX emulated, other
// inline assembly refused), archs that preprocess alike run once; and the
// host pass (kernelsim.Source.ParseOnly) must agree with each device pass
// on the layout of Signal, RankSignals and PcieIslands and on the islands
// it hands the kernels, or the kernels would read what the host did not
// write.
func (cx *cxxJudge) checkPush(ctx context.Context, runs []*pushRun, rep *Report) error {
	if len(runs) == 0 {
		return nil
	}
	dir, header := filepath.Join(cacheDir(), "kernelsim"), string(cx.src.Files[cx.header])
	host, err := kernelsim.Build(ctx, dir, kernelsim.Source{Header: header, ParseOnly: true})
	var passes []devicePass
	if err == nil {
		passes, err = devicePasses(ctx, dir, header)
	}
	var asmErr *kernelsim.UnknownAsmError
	switch {
	case errors.Is(err, kernelsim.ErrNoCompiler):
		rep.Notes = append(rep.Notes, fmt.Sprintf("%v; so the push kernels %s launches (%d) were not run", err, cx.header, len(runs)))
		return nil
	case errors.As(err, &asmErr):
		return &DispatchError{Path: cx.header, Problem: "its push kernels, which CustomAllreduce::allreduce launches where the gates admit custom allreduce, cannot be run as the GPU would run them: " + err.Error(),
			Remedy: "write the kernels' flag stores and loads with upstream's st_flag_release, ld_flag_acquire, st_flag_volatile and ld_flag_volatile, and no other inline assembly"}
	case err != nil:
		return &DispatchError{Path: cx.header, Problem: "its push kernels, which CustomAllreduce::allreduce launches where the gates admit custom allreduce, do not compile for arpatch's CPU emulation (package kernelsim): " + err.Error(),
			Remedy: "keep the pcie_push_* kernels' signatures as the pcie series has them, or report what kernelsim lacks"}
	}
	for _, pr := range runs {
		hp, err := host.Parse(ctx, pr.c.WS, parseCap, pr.env, pr.from, pr.to)
		if err != nil {
			return err
		}
		for _, d := range passes {
			dp, err := d.sim.Parse(ctx, pr.c.WS, parseCap, pr.env, pr.from, pr.to)
			if err != nil {
				return err
			}
			if hp.Layout != dp.Layout || hp.IslandsHex != dp.ParsedHex || hp.Error != dp.Error {
				return &DispatchError{Path: cx.header, Problem: fmt.Sprintf("CustomAllreduce's host pass and %s disagree at world size %d (%s): the host pass has %s and hands the kernels the islands %s; the device pass has %s and its kernels read the islands %s, so on a GPU the push kernel %s would read what the host did not write",
					d, pr.c.WS, envText(pr.env), hp.Layout, islandsText(hp.IslandsHex, hp.Error), dp.Layout, islandsText(dp.ParsedHex, dp.Error), pr.kernel),
					Remedy: "do not test __CUDA_ARCH__ or the arch feature macros in CustomAllreduce's host code, in Signal, RankSignals or PcieIslands"}
			}
			res, err := reduceKept(ctx, d.sim, pr.c)
			if err != nil {
				return err
			}
			if !res.OK {
				return &DispatchError{Path: cx.header, Problem: fmt.Sprintf("the push kernel %s, which CustomAllreduce::allreduce launches %s, run on the CPU as %s on %d emulated ranks (package kernelsim) at %d sizes from %d to %d packed elements, %s",
					pr.kernel, pr.where, d, pr.c.WS, len(pr.c.Packs), pr.c.Packs[0], slices.Max(pr.c.Packs), resultText(res)),
					Remedy: "a push kernel must leave every rank the exact sum of every rank's input, at every size it is launched for, in the device pass of every arch"}
			}
		}
		rep.Pushed++
	}
	return nil
}

// islandsText is a build's islands bytes for a refusal, or what it threw.
func islandsText(hex, ctorErr string) string {
	switch {
	case ctorErr != "":
		return "none (the constructor threw: " + ctorErr + ")"
	case len(hex) > 48:
		return hex[:48] + "..."
	}
	return hex
}

func resultText(r kernelsim.Result) string {
	if r.Error != "" {
		return "does not finish: " + r.Error
	}
	return "leaves a wrong sum: " + r.String()
}

var pruneResults sync.Once

// reduceKept is sim.Reduce(c), answered from cacheDir/kernelsim/results
// where the same driver ran the same case before (a run is
// deterministic: the sizes, blocks and inputs come from the case).
func reduceKept(ctx context.Context, sim *kernelsim.Sim, c kernelsim.Case) (kernelsim.Result, error) {
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(append([]byte(sim.ID()+"\x00"), b...))
	f := filepath.Join(cacheDir(), "kernelsim", "results", hex.EncodeToString(sum[:])[:32]+".json")
	var r kernelsim.Result
	if kept, err := os.ReadFile(f); err == nil && json.Unmarshal(kept, &r) == nil && (r.OK || r.Error != "" || r.Want != r.Got) {
		return r, nil
	}
	r, err := sim.Reduce(ctx, c)
	if err != nil {
		return r, err
	}
	pruneResults.Do(func() {
		if ents, err := os.ReadDir(filepath.Dir(f)); err == nil && len(ents) > 4096 {
			_ = os.RemoveAll(filepath.Dir(f)) // too many kept: start again
		}
	})
	if out, err := json.Marshal(r); err == nil && os.MkdirAll(filepath.Dir(f), 0o755) == nil {
		tmp := fmt.Sprintf("%s.%d.tmp", f, os.Getpid())
		if os.WriteFile(tmp, out, 0o644) != nil || os.Rename(tmp, f) != nil {
			_ = os.Remove(tmp) // the cache is only a cache
		}
	}
	return r, nil
}
