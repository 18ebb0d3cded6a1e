package gaterule

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/arpatch/arpatch/patches/sglenv"
)

// envValues are the values the judge gives each variable it drives, where
// it knows the variable: the pcie series' own (their documented values
// and examples, and one value each that is no value, which a series must
// refuse at init or still launch for: a refusal in the gates or the
// constructor leaves the gates closed, but one that falls through to a
// dispatch launching nothing returns unreduced data) and upstream's
// forced algorithm. A variable it does not know gets defaultValues.
// "{islands2}" is two islands of equal size at the world size
// (py/judge.py expands it).
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (CustomAllreduce::allreduce: SGLANG_CUSTOM_ALLREDUCE_ALGO)
var envValues = map[string][]string{
	sglenv.Force:       {"1"},
	sglenv.Algo:        {"1stage", "2stage"},
	sglenv.Schedule:    {"push1", "push2", "island", "pull1", "pull2", "push1:65536,push2", "push1:32768,island", "bogus"},
	sglenv.OneStageMax: {"0", "65536", "64K?"},
	sglenv.Islands:     {"{islands2}", "0/1"},
	sglenv.MaxBytes:    {"0", "65536", "64K?"},
}

var defaultValues = []string{"1"}

// probes are the sizes (bytes, bfloat16 tensors) the Python gates are
// asked about: small ones, the 4 KiB boundary, an EAGLE-3 verify pass (4
// tokens x hidden 5120 x 2 bytes = 40 KiB), and the pcie series' and
// upstream's caps with their neighbours.
var probes = []uint64{16, 4096, 4112, 40960, 65536, 65552, 1 << 20, 4194304, 4194320, 8388608, 8388624}

// maxScenarios bounds the environments the Python judge runs.
const maxScenarios = 64

// requirements runs the Python judge and returns where the gates admit
// custom allreduce on PCIe-only GPUs, or the refusal of what the gates
// themselves do wrong. Where the Python judge cannot run it falls back on
// what the series touches (Input.touchesGates), and says so in rep.Notes.
func requirements(ctx context.Context, in Input, cxxNames []string, rep *Report) ([]requirement, error) {
	if p := in.unfollowedPython(); p != "" {
		return fallback(in, cxxNames, "the series changes "+p+", which Python loads but the gate judge does not follow (a compiled module, bytecode, a sitecustomize or a .pth file)", rep), nil
	}
	if !hasSGLang(in) {
		if !in.touchesGates() {
			return nil, nil
		}
		return fallback(in, cxxNames, "the tree has no SGLang Python package (python/sglang), so no gates were run", rep), nil
	}
	plan := pyPlan{WS: WorldSizes, Probes: probes, Values: envValues, DefaultValues: defaultValues,
		ExtraNames: cxxNames, Changed: in.Changed, MaxScenarios: maxScenarios}
	if plan.ExtraNames == nil {
		plan.ExtraNames = []string{}
	}
	if plan.Changed == nil {
		plan.Changed = []string{}
	}
	py, seen, err := judgePython(ctx, in, plan)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return fallback(in, cxxNames, "the Python gates were not run ("+err.Error()+")", rep), nil
	}
	if p := unreadPython(in, seen); p != "" {
		return fallback(in, cxxNames, "the series changes "+p+", which the Python gates' imports did not read: SGLang's server may import it before the gates decide (a module that replaces a gate function, say), so the gate judge cannot follow it", rep), nil
	}
	if why := unjudged(py.Scenarios[0]); why != "" {
		return fallback(in, cxxNames, why, rep), nil
	}
	var reqs []requirement
	primary := map[int]bool{} // a world size whose first admitting scenario was seen
	for _, sc := range py.Scenarios {
		for _, w := range sc.Results {
			r, err := judgeWS(sc.Env, w, !primary[w.WS])
			if err != nil {
				return nil, err
			}
			if r != nil {
				reqs = append(reqs, *r)
				primary[w.WS] = true
			}
		}
	}
	return reqs, nil
}

// unjudged says why the gates could not be judged with no variable set,
// or "": their modules did not import, or CustomAllreduce could not be
// constructed at any world size (upstream's comes up at least on a PCIe
// pair, so that is the judge's failure, or the gates' shape is not
// SGLang's).
func unjudged(base pyScenario) string {
	for _, w := range base.Results {
		if w.Import != "" {
			return fmt.Sprintf("the Python gate modules did not import under the judge (%s at %s)", w.Import, w.Where)
		}
	}
	var first string
	for _, w := range base.Results {
		for _, r := range w.Ranks {
			if r != nil && r.Init == "ok" {
				return ""
			}
			if r != nil && first == "" && !strings.Contains(r.Init, "BrokenBarrierError") {
				first = fmt.Sprintf("%s at %s", strings.TrimPrefix(r.Init, "raise: "), r.Where)
			}
		}
	}
	return "CustomAllreduce could not be constructed under the judge at any world size (" + first + ")"
}

// fallback is the requirements where the gates could not be run: taken
// as open at every world size when the series touches them, as closed
// (upstream's) otherwise.
func fallback(in Input, names []string, why string, rep *Report) []requirement {
	if !in.touchesGates() {
		rep.Notes = append(rep.Notes, why+"; the series does not change SGLang's Python side, so its gates are taken as upstream's, closed on PCIe above 2 GPUs")
		return nil
	}
	rep.Notes = append(rep.Notes, why+"; the series changes SGLang's Python side (or says it opens the gates), so they are taken as open at every world size")
	envs := []map[string]string{{}}
	for _, n := range names {
		for _, v := range valuesOf(n) {
			envs = append(envs, map[string]string{n: v})
		}
	}
	var reqs []requirement
	for i, env := range envs {
		for _, ws := range WorldSizes {
			ke := maps.Clone(env)
			for k, v := range ke {
				ke[k] = expandValue(v, ws)
			}
			reqs = append(reqs, requirement{Env: env, WS: ws, KernelEnv: ke, UpTo: defaultCap, Cap: defaultCap,
				AllRanks: i == 0, Why: "the Python gates taken as open"})
		}
	}
	return reqs
}

func valuesOf(name string) []string {
	if v, ok := envValues[name]; ok {
		return v
	}
	return defaultValues
}

// expandValue is py/judge.py's expansion of "{islands2}" at ws.
func expandValue(v string, ws int) string {
	if v != "{islands2}" {
		return v
	}
	var a, b []string
	for r := 0; r < ws; r++ {
		if r < ws/2 {
			a = append(a, fmt.Sprint(r))
		} else {
			b = append(b, fmt.Sprint(r))
		}
	}
	return strings.Join(a, ",") + "/" + strings.Join(b, ",")
}

// judgeWS reads one world size of one scenario: the refusal of gates that
// disagree across ranks, admit through another class than sgl-kernel's,
// or admit a call they never hand to sgl-kernel; else the requirement
// there, or nil where nothing is admitted.
func judgeWS(env map[string]string, w pyWS, primary bool) (*requirement, error) {
	if w.Import != "" {
		return nil, nil // the import fails: the server does not start
	}
	at := fmt.Sprintf("world size %d, %s", w.WS, envText(env))
	var first *pyRank
	var firstAdmits []bool
	for _, r := range w.Ranks {
		if r == nil {
			return nil, gateError(at, "rank emulation did not finish (a rank waits for a collective the others never reach)")
		}
		adm := admitted(r)
		if r.Init == "ok" && r.Enabled && !r.Legacy && anyTrue(adm) {
			return nil, gateError(at, fmt.Sprintf("the gates admit custom allreduce through %s, not sgl-kernel's CustomAllreduce, which is the dispatch arpatch judges", r.Class))
		}
		for i, ok := range adm {
			if ok && i < len(r.Reduced) && r.Reduced[i] == false {
				return nil, gateError(at, fmt.Sprintf("should_custom_ar admits %d bytes, but custom_all_reduce returns without calling sgl-kernel's all_reduce (rank %d)", probes[i], r.Rank))
			}
		}
		if first == nil {
			first, firstAdmits = r, adm
		} else if fmt.Sprint(adm) != fmt.Sprint(firstAdmits) {
			return nil, gateError(at, fmt.Sprintf("ranks %d and %d admit different sizes (%s against %s); ranks that disagree wait for each other forever", first.Rank, r.Rank, admittedText(firstAdmits), admittedText(adm)))
		}
	}
	if first == nil || !anyTrue(firstAdmits) {
		return nil, nil
	}
	req := &requirement{Env: env, WS: w.WS, UpTo: upTo(firstAdmits), Cap: defaultCap, AllRanks: primary,
		Why: "the Python gates admit it"}
	if first.MaxSize != nil && *first.MaxSize > req.Cap {
		req.Cap = *first.MaxSize
	}
	req.UpTo = min(req.UpTo, req.Cap)
	req.KernelEnv = env
	if ki := first.KernelInit; ki != nil {
		req.KernelEnv, req.NVL = ki.Env, ki.FullNVLink
	}
	return req, nil
}

func gateError(at, problem string) error {
	return &DispatchError{Path: GateFiles[1], Problem: "at " + at + ", " + problem,
		Remedy: "the gates must admit custom allreduce on a PCIe-only group the same way on every rank, through sgl-kernel's CustomAllreduce, and hand every admitted call to its all_reduce"}
}

func envText(env map[string]string) string {
	if len(env) == 0 {
		return "no variable set"
	}
	var kv []string
	for _, k := range sortedKeys(env) {
		kv = append(kv, k+"="+env[k])
	}
	return strings.Join(kv, " ")
}

// admitted is, per probe, whether the rank's gates admit it.
func admitted(r *pyRank) []bool {
	out := make([]bool, len(probes))
	if r.Init != "ok" || !r.Enabled {
		return out
	}
	for i := range out {
		if i < len(r.Admit) {
			out[i] = r.Admit[i] == true
		}
	}
	return out
}

func anyTrue(b []bool) bool {
	for _, x := range b {
		if x {
			return true
		}
	}
	return false
}

// upTo is the largest size the dispatch must take: up to just below the
// first probe the gates refuse after the last one they admit, or the cap.
func upTo(adm []bool) uint64 {
	last := -1
	for i, ok := range adm {
		if ok {
			last = i
		}
	}
	if last+1 < len(probes) {
		return probes[last+1] - 16
	}
	return 1 << 62
}

func admittedText(adm []bool) string {
	var s []string
	for i, ok := range adm {
		if ok {
			s = append(s, fmt.Sprint(probes[i]))
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ") + " bytes"
}

// unreadPython returns a Python file of the series under python/ that
// the Python judge did not read (seen: its reads), if any. The judge
// imports the gate modules and what they import; the server imports much
// more before the gates decide, and any of it may replace a gate.
func unreadPython(in Input, seen map[string]string) string {
	for _, p := range in.Changed {
		if strings.HasPrefix(p, "python/") && strings.HasSuffix(p, ".py") {
			if _, ok := seen[p]; !ok {
				return p
			}
		}
	}
	return ""
}
