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
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/arpatch/arpatch/patches/kernelsim"
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
	where    string // the first place the dispatch launches it
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
				islands := r.KernelEnv["SGLANG_PCIE_CUSTOM_AR_ISLANDS"]
				key := run.Kernel + "/" + islands
				pr := runs[key]
				if pr == nil {
					ws, _ := strconv.Atoi(m[3])
					pr = &pushRun{kernel: run.Kernel, packs: map[int]bool{}, from: from, to: to,
						c:     kernelsim.Case{DType: pushDType[m[2]], WS: ws, Algo: pushAlgo[m[1]], Islands: islands, Threads: 8, Seed: 1, Timeout: 30 * time.Second},
						where: fmt.Sprintf("at %s, %s allreduce of %s", r.where(), call, bytesRange(from, to))}
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

// checkPush runs the push kernels of runs and returns the refusal of one
// that leaves a wrong sum or hangs; without a host compiler it notes what
// was not run.
func (cx *cxxJudge) checkPush(ctx context.Context, runs []*pushRun, rep *Report) error {
	if len(runs) == 0 {
		return nil
	}
	sim, err := kernelsim.Build(ctx, filepath.Join(cacheDir(), "kernelsim"), kernelsim.Source{Header: string(cx.src.Files[cx.header])})
	switch {
	case errors.Is(err, kernelsim.ErrNoCompiler):
		rep.Notes = append(rep.Notes, fmt.Sprintf("%v; so the push kernels %s launches (%d) were not run", err, cx.header, len(runs)))
		return nil
	case err != nil:
		return &DispatchError{Path: cx.header, Problem: "its push kernels, which CustomAllreduce::allreduce launches where the gates admit custom allreduce, do not compile for arpatch's CPU emulation (package kernelsim): " + err.Error(),
			Remedy: "keep the pcie_push_* kernels' signatures as the pcie series has them, or report what kernelsim lacks"}
	}
	for _, pr := range runs {
		res, err := reduceKept(ctx, sim, pr.c)
		if err != nil {
			return err
		}
		if !res.OK {
			return &DispatchError{Path: cx.header, Problem: fmt.Sprintf("the push kernel %s, which CustomAllreduce::allreduce launches %s, run on the CPU on %d emulated ranks (package kernelsim) at %d sizes from %d to %d packed elements, %s",
				pr.kernel, pr.where, pr.c.WS, len(pr.c.Packs), pr.c.Packs[0], slices.Max(pr.c.Packs), resultText(res)),
				Remedy: "a push kernel must leave every rank the exact sum of every rank's input, at every size it is launched for"}
		}
		rep.Pushed++
	}
	return nil
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
