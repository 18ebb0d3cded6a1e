package allreduce

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/nvsmi"
)

// replay runs Execute on fake ranks that write the JSON lines of
// testdata/name (handwritten in bench.py's format) as the run's records,
// and returns the report of opts.
func replay(t *testing.T, name string, opts Options) *Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	opts.Python, opts.Timeout = fakeTorchrun(t, string(b), ""), time.Minute
	run, err := Execute(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return NewReport(opts, Verify{Count: 122, Bytes: 40960}, run, "test")
}

// TestPushOversubscribed: world size 4, ranks two to a GPU (correctness
// only), push1 and island through both branches, two layouts, two dtypes,
// 4K, 8M and each kernel's cap. Every case is accounted for: NCCL
// skipped, the nvlink branch not applicable, 8M n/a (it does not fit the
// push kernels' scratch), each cap marked; nothing missing, nothing
// failed, nothing timed.
func TestPushOversubscribed(t *testing.T) {
	opts := Options{WorldSize: 4, Sizes: []int{4096, 8 << 20}, Cap: true, Impls: []string{NCCL, CustomPush1, CustomIsland},
		Branches: []string{"nvlink", "pcie"}, Modes: []string{ModeEager}, DTypes: []string{BF16, FP32},
		Layouts: []Islands{Consecutive(4, 2), Strided(4, 2)}}
	if got := strings.Join(torchrunArgs(opts.resolved(), "b.py", "o"), " "); !strings.Contains(got, " --sizes 4096,8388608,cap --impls nccl,custom-push1,custom-island --branches nvlink,pcie --modes eager --dtypes bf16,fp32 --islands 0,1/2,3 --islands 0,2/1,3 ") {
		t.Errorf("args: %s", got)
	}
	rep := replay(t, "push-ws4-oversub.jsonl", opts)
	if rep.Failed() || len(rep.Missing) != 0 || rep.Run.AlgoProbe == nil || !rep.Run.AlgoProbe.Refused || !rep.Run.Env.Oversubscribed {
		t.Fatalf("failed %v, missing %v, probe %+v", rep.Failed(), rep.Missing, rep.Run.AlgoProbe)
	}
	status := map[string]int{}
	caps := map[string]int{}
	for _, r := range rep.Run.Results {
		status[r.Status()]++
		if r.Timed() {
			t.Errorf("timed on an oversubscribed run: %+v", r)
		}
		if r.Cap {
			caps[caseName(r)] = r.Bytes
		}
	}
	if !reflect.DeepEqual(status, map[string]int{"ok": 12, "n/a": 8, "skipped": 1}) {
		t.Errorf("statuses %v", status)
	}
	// The caps of the series' scratch needs (0001's pcie_scratch_needed)
	// in 8 MiB: push1 N*S <= 8M
	// gives 2M at world size 4; island (M+K)*S/M + S = 3S <= 8M, in 16-byte
	// packs, gives 2796192.
	if !reflect.DeepEqual(caps, map[string]int{"custom-push1/pcie": 2 << 20, "custom-island/pcie[0,1/2,3]": 2796192, "custom-island/pcie[0,2/1,3]": 2796192}) {
		t.Errorf("caps %v", caps)
	}
	f := strings.Join(rep.Findings, "\n")
	for _, want := range []string{
		"n/a custom-push1/nvlink (not run): the push algorithms exist on the PCIe branch only",
		"n/a custom-push1/pcie at 8M (not run): custom-push1 needs 33554432 bytes of scratch at 8388608 bytes (world size 4)",
		"n/a custom-island/pcie[0,2/1,3] at 8M (not run)",
		"oversubscribed: 4 ranks on 2 GPUs",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("findings lack %q:\n%s", want, f)
		}
	}
	var tab strings.Builder
	rep.WriteTable(&tab)
	for _, want := range []string{"mode eager, bf16\n", "mode eager, fp32\n", "custom-island/pcie[0,2/1,3]", "islands (SGLANG_PCIE_CUSTOM_AR_ISLANDS): 0,1/2,3; 0,2/1,3\n"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	// The same run without its last case: the layout, dtype and cap of
	// what is missing are named.
	cut := *rep.Run
	cut.Results = slices.DeleteFunc(slices.Clone(cut.Results), func(r Result) bool { return r.Islands == "0,2/1,3" && r.Cap && r.DType == FP32 })
	if got := MissingCases(opts, cut.Results); !reflect.DeepEqual(got, []string{"custom-island/pcie[0,2/1,3] at its cap (eager, fp32)"}) {
		t.Errorf("missing %q", got)
	}
}

// TestPushUnsupported: an extension that takes SGLANG_PCIE_CUSTOM_AR_ALGO=bogus
// predates the push kernels: they are UNSUPPORTED, never timed, and the
// run fails (as an extension without the run-time thresholds fails tune).
func TestPushUnsupported(t *testing.T) {
	opts := Options{WorldSize: 2, Sizes: []int{40960}, Impls: []string{Custom1Stage, CustomPush1, CustomIsland}, Branches: []string{"pcie"},
		Modes: []string{ModeGraph}, DTypes: []string{BF16}}
	// The run had two islands of one rank.
	opts.Layouts = []Islands{{{0}, {1}}}
	rep := replay(t, "push-unsupported.jsonl", opts)
	if !rep.Failed() || len(rep.Missing) != 0 || rep.Run.AlgoProbe == nil || rep.Run.AlgoProbe.Refused {
		t.Fatalf("failed %v, missing %v, probe %+v", rep.Failed(), rep.Missing, rep.Run.AlgoProbe)
	}
	if !strings.HasPrefix(rep.Findings[0], "UNSUPPORTED push algorithms: init_custom_ar took SGLANG_PCIE_CUSTOM_AR_ALGO=bogus without complaint") {
		t.Errorf("findings %q", rep.Findings)
	}
	var tab strings.Builder
	rep.WriteTable(&tab)
	if !regexp.MustCompile(`(?m)^mode graph\nsize +custom-1stage/pcie +custom-push1/pcie +custom-island/pcie\[0/1\] +\n40K\* +4.6 \[4.5-4.8\] +UNSUPPORTED +UNSUPPORTED +$`).MatchString(tab.String()) {
		t.Errorf("table:\n%s", tab.String())
	}
	for _, c := range rep.Costs {
		if PushOnly(c.Impl) {
			t.Errorf("an unsupported kernel has a cost: %+v", c)
		}
	}
}

// TestPushWrong: a push kernel whose sum is wrong fails the run and is
// never fast: it has no cost, and the best custom is another kernel.
func TestPushWrong(t *testing.T) {
	opts := Options{WorldSize: 2, Sizes: []int{40960}, Impls: []string{NCCL, CustomPush1, CustomPush2}, Branches: []string{"pcie"},
		Modes: []string{ModeGraph}, DTypes: []string{BF16}}
	rep := replay(t, "push-wrong.jsonl", opts)
	if !rep.Failed() || !strings.Contains(strings.Join(rep.Findings, "\n"), "WRONG custom-push1/pcie at 40K (graph): rank 1 element 0 is nan, want 3.0 (20480 of 20480 elements wrong)") {
		t.Errorf("failed %v, findings %q", rep.Failed(), rep.Findings)
	}
	best, nccl, ok := rep.BestCustom(ModeGraph)
	if !ok || best.Impl != CustomPush2 || nccl != 8.6 || len(rep.Costs) != 2 {
		t.Errorf("best %+v vs NCCL %.1f, costs %+v", best, nccl, rep.Costs)
	}
}

func TestParseIslands(t *testing.T) {
	for in, want := range map[string]string{
		"0,1,2,3/4,5,6,7": "0,1,2,3/4,5,6,7",
		"4,5,6,7/3,2,1,0": "0,1,2,3/4,5,6,7", // one spelling per partition
		"0,2/1,3":         "0,2/1,3",
		"0/1":             "0/1",
		"0,1":             "0,1",
	} {
		is, err := ParseIslands(in, 0)
		if err != nil || is.String() != want {
			t.Errorf("ParseIslands(%q) = %s, %v; want %s", in, is, err, want)
		}
	}
	for _, c := range []struct {
		in   string
		ws   int
		want string
	}{
		{"0,1/2", 4, "rank 3 is missing (world size 4)"},
		{"0,1/2,3", 8, "rank 4 is missing (world size 8)"},
		{"0,1,2/3", 4, "islands of 3 and 1 ranks"},
		{"0,1/2,8", 4, "rank 8 is out of range (world size 4: ranks 0 to 3)"},
		{"0,1/1,2", 3, "rank 1 is in more than one place"},
		{"0,1//2,3", 4, "an island is empty"},
		{"0,1/2,3/", 4, "an island is empty"},
		{"0, 1/2,3", 4, `" 1" is not a rank`},
		{"0,+1/2,3", 4, `"+1" is not a rank`},
		{"0,01/2,3", 4, `"01" is not a rank`},
		{"", 2, "an island is empty"},
	} {
		_, err := ParseIslands(c.in, c.ws)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), `"`+c.in+`": `) {
			t.Errorf("ParseIslands(%q, %d) = %v, want %q", c.in, c.ws, err, c.want)
		}
	}
	var got []string
	for _, is := range AllLayouts(8) {
		got = append(got, is.String())
	}
	if want := []string{"0,1,2,3,4,5,6,7", "0,1,2,3/4,5,6,7", "0,2,4,6/1,3,5,7", "0,1/2,3/4,5/6,7", "0,4/1,5/2,6/3,7", "0/1/2/3/4/5/6/7"}; !reflect.DeepEqual(got, want) {
		t.Errorf("AllLayouts(8) = %q", got)
	}
	if n := len(AllLayouts(6)); n != 6 { // one; 3+3 two ways; 2+2+2 two ways; six of one
		t.Errorf("AllLayouts(6): %d layouts", n)
	}
	if got := AllLayouts(2); len(got) != 2 || got[1].String() != "0/1" {
		t.Errorf("AllLayouts(2) = %v", got)
	}
	ls, err := ParseLayouts([]string{"0,1/2,3", "all", "0,2/1,3"}, 4)
	if err != nil || len(ls) != 4 || ls[0].String() != "0,1/2,3" {
		t.Errorf("ParseLayouts = %v, %v; want 0,1/2,3 first, each layout once", ls, err)
	}
}

// TestHostIslands derives islands from the recorded nvidia-smi outputs of
// harness/doctor/testdata, as 0002 does from NVML: GPUs joined by anything
// but SYS share an island.
func TestHostIslands(t *testing.T) {
	topo := func(host string) *nvsmi.Topology {
		b, err := os.ReadFile(filepath.Join("..", "doctor", "testdata", host, "topo-m.txt"))
		if err != nil {
			t.Fatal(err)
		}
		tp, err := nvsmi.ParseTopoMatrix(string(b))
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	all8 := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, c := range []struct {
		host    string
		visible []int
		ws      int
		want    string
		why     string
	}{
		{"pcie8", all8, 8, "0,1,2,3/4,5,6,7", "2 islands of 4"}, // two sockets of two switches
		{"pcie8", all8, 4, "0,1,2,3", "no SYS link"},            // the first four ranks: one socket
		{"pcie8", []int{0, 1, 4, 5}, 4, "0,1/2,3", "2 islands of 2"},
		{"pcie8", []int{6, 7, 2, 3}, 4, "0,1/2,3", "2 islands of 2"},
		{"pcie8", []int{0, 1, 2, 4}, 4, "0,1,2,3", "islands of unequal size (0,1,2/3)"},
		{"pcie8", []int{0, 4}, 2, "0/1", "2 islands of 1"},
		{"pcie8", all8[:2], 4, "0,1,2,3", "4 ranks on 2 GPUs (oversubscribed)"},
		{"switch4", []int{0, 1, 2, 3}, 4, "0,1,2,3", "no SYS link"},
		{"h200x2", []int{0, 1}, 2, "0,1", "no SYS link"},
		{"pcie8", []int{0, 9}, 2, "0,1", "no row GPU9 for rank 1"},
	} {
		is, why := HostIslands(topo(c.host), c.visible, c.ws)
		if is.String() != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s %v ws %d: %s (%s), want %s (%s)", c.host, c.visible, c.ws, is, why, c.want, c.why)
		}
	}
	if is, why := HostIslands(nil, nil, 4); is.String() != "0,1,2,3" || !strings.Contains(why, "unknown") {
		t.Errorf("no topology: %s (%s)", is, why)
	}
}

// TestNCCLAccount reads what NCCL_DEBUG=INFO (ENV, TUNING) says a variant
// chose: the knobs it took, its algorithm and protocol per size (once per
// distinct choice, by size, with or without torchrun's prefix), its WARN
// lines once each. Handwritten in NCCL's log format (src/enqueue.cc's
// TUNING line, src/misc/param.cc's "set by environment").
func TestNCCLAccount(t *testing.T) {
	b, err := os.ReadFile("testdata/nccl-variants.txt")
	if err != nil {
		t.Fatal(err)
	}
	tr := ParseNCCLTransport(strings.Split(string(b), "\n"))
	if !reflect.DeepEqual(tr.Env, map[string]string{"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "2"}) || tr.Channels != 2 || tr.Version != "2.28.9" {
		t.Errorf("env %v, channels %d, version %s", tr.Env, tr.Channels, tr.Version)
	}
	var chose []string
	for _, c := range tr.Chose {
		chose = append(chose, c.String())
	}
	if want := []string{"4K RING/LL128 channels 0..0", "40K RING/LL128 channels 0..1", "1M TREE/LL128 channels 0..1", "1M RING/LL128 channels 0..1"}; !reflect.DeepEqual(chose, want) {
		t.Errorf("chose %q", chose)
	}
	if tr.At(1<<20) != "TREE/LL128 channels 0..1; RING/LL128 channels 0..1" || tr.At(8192) != "" {
		t.Errorf("At: %q %q", tr.At(1<<20), tr.At(8192))
	}
	if !reflect.DeepEqual(tr.Warnings, []string{"Invalid NCCL_BUFFSIZE -1, using default 4194304"}) {
		t.Errorf("warnings %q", tr.Warnings)
	}
}

// TestExecuteVariants runs the built-in NCCL variants on the fake ranks of
// harness/tune/testdata/fakeranks.sh: one run each, at its sizes, with
// its knob and none of the environment's others, each result named by its
// variant; none after a run that did not end ok or was oversubscribed,
// and P2P-SYS only after NCCL used SHM.
func TestExecuteVariants(t *testing.T) {
	py, err := filepath.Abs("../tune/testdata/fakeranks.sh")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Python: py, WorldSize: 2, Sizes: []int{4096, 1 << 20}, Modes: []string{ModeGraph}, Timeout: time.Minute,
		Env: []string{"PATH=" + os.Getenv("PATH"), "NCCL_ALGO=Tree", "FAKE_AR_LL_US=9"}}
	main := &Run{Exit: "ok", Env: RunEnv{WorldSize: 2, Devices: 2}}
	runs, skipped, err := ExecuteVariants(context.Background(), opts, main, NCCLVariants)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, vr := range runs {
		names = append(names, vr.Variant.Name)
		if vr.Run.Exit != "ok" || len(vr.Missing) != 0 || len(vr.Run.NCCL.Env) != 1 {
			t.Errorf("%s: exit %s, missing %v, NCCL took %v", vr.Variant.Name, vr.Run.Exit, vr.Missing, vr.Run.NCCL.Env)
		}
		for _, r := range vr.Run.Results {
			if r.Variant != vr.Variant.Name || r.Impl != NCCL || !slices.Contains(vr.Sizes, r.Bytes) {
				t.Errorf("%s: %+v", vr.Variant.Name, r)
			}
		}
	}
	if want := []string{"LL", "LL128", "Simple", "Ring", "Tree", "ch2", "ch16", "buff1M"}; !reflect.DeepEqual(names, want) {
		t.Errorf("ran %v", names)
	}
	if runs[0].Sizes[0] != 4096 || len(runs[0].Sizes) != 1 || runs[0].Run.Results[0].MedianUS != 9 || runs[2].Sizes[0] != 1<<20 {
		t.Errorf("LL at %v (%+v), Simple at %v", runs[0].Sizes, runs[0].Run.Results, runs[2].Sizes)
	}
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "nccl:P2P-SYS: not run") {
		t.Errorf("skipped %q", skipped)
	}
	main.NCCL.Transports = map[string]int{"SHM": 2}
	if runs, _, _ := ExecuteVariants(context.Background(), opts, main, []NCCLVariant{NCCLVariants[8]}); len(runs) != 1 || runs[0].Run.NCCL.Env["NCCL_P2P_LEVEL"] != "SYS" {
		t.Errorf("P2P-SYS after SHM: %+v", runs)
	}
	for _, m := range []*Run{{Exit: "timeout"}, {Exit: "ok", Env: RunEnv{WorldSize: 4, Devices: 2, Oversubscribed: true}}} {
		if runs, skipped, _ := ExecuteVariants(context.Background(), opts, m, NCCLVariants[:2]); len(runs) != 0 || len(skipped) != 2 {
			t.Errorf("after %+v: ran %d, skipped %q", m, len(runs), skipped)
		}
	}
	vs, err := ParseVariants([]string{"Tree", "all", "none"})
	if err != nil || len(vs) != len(NCCLVariants) || vs[0].Name != "Tree" {
		t.Errorf("ParseVariants = %v, %v", vs, err)
	}
	if _, err := ParseVariants([]string{"tree"}); err == nil || !strings.Contains(err.Error(), `"tree": use all, none, LL`) {
		t.Errorf("ParseVariants(tree) = %v", err)
	}
}

// TestBenchPyScratch checks bench.py's scratch_need and cap_size (which
// decide what is n/a and what "cap" means) against the series' scratch
// formulas (0001's CustomAllreduce::pcie_scratch_needed) worked by hand, and its forcing of each implementation, by
// running those functions under python3 without torch (skipped where there
// is none).
func TestBenchPyScratch(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	prog := `
import ast, json, sys
src = open(sys.argv[1]).read()
ns = {}
for n in ast.parse(src).body:
    if isinstance(n, ast.Assign) or isinstance(n, ast.FunctionDef) and n.name in ("ceil_div", "scratch_need", "cap_size", "forcing"):
        seg = ast.get_source_segment(src, n)
        if isinstance(n, ast.Assign) and not seg.split("=")[0].strip().isupper():
            continue
        exec(seg, ns)
caps = {"%s/%d/%d" % (i, w, m): ns["cap_size"](i, w, m, 8 << 20) for i, w, m in [
    ("custom-push1", 2, 0), ("custom-push1", 8, 0), ("custom-push2", 8, 0), ("custom-push2", 6, 0),
    ("custom-island", 8, 4), ("custom-island", 8, 2), ("custom-island", 6, 3), ("custom-island", 4, 2), ("custom-2stage", 8, 0)]}
force = {i: ns["forcing"](i) for i in ("custom-1stage", "custom-push2", "custom-auto")}
print(json.dumps({"caps": caps, "force": force, "need": ns["scratch_need"]("custom-push2", 6, 0, 40960)}))
`
	out, err := exec.Command(py, "-c", prog, "bench.py").CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	var got struct {
		Caps  map[string]int
		Force map[string]map[string]*string
		Need  int
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]int{
		"custom-push1/2/0":  4 << 20, // N*S <= 8M
		"custom-push1/8/0":  1 << 20,
		"custom-push2/8/0":  4 << 20, // 8*S/8 + S = 2S
		"custom-push2/6/0":  4194272, // 6*pack(S/6) + S, packs of 16 bytes
		"custom-island/8/4": 3355424, // (4+2)*S/4 + S = 2.5S
		"custom-island/8/2": 2 << 20, // (2+4)*S/2 + S = 4S
		"custom-island/6/3": 3 << 20, // (3+2)*S/3 + S
		"custom-island/4/2": 2796192, // (2+2)*S/2 + S = 3S
		"custom-2stage/8/0": 8 << 20, // the pull kernels: max_size
	}
	if !reflect.DeepEqual(got.Caps, want) {
		t.Errorf("caps %v, want %v", got.Caps, want)
	}
	if got.Need != 6*6832+40960 { // 40960/6 = 6826.7 -> 6832 in packs of 16
		t.Errorf("push2 at 40K, world size 6: %d bytes of scratch", got.Need)
	}
	str := func(m map[string]*string) string {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v := "unset"
			if m[k] != nil {
				v = *m[k]
			}
			parts = append(parts, k+"="+v)
		}
		return strings.Join(parts, " ")
	}
	for impl, want := range map[string]string{
		"custom-1stage": "SGLANG_CUSTOM_ALLREDUCE_ALGO=1stage SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=unset SGLANG_PCIE_CUSTOM_AR_ALGO=unset",
		"custom-push2":  "SGLANG_CUSTOM_ALLREDUCE_ALGO=unset SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=unset SGLANG_PCIE_CUSTOM_AR_ALGO=push2",
		"custom-auto":   "SGLANG_CUSTOM_ALLREDUCE_ALGO=unset",
	} {
		if got := str(got.Force[impl]); got != want {
			t.Errorf("forcing(%s): %s, want %s", impl, got, want)
		}
	}
}

// TestVariantFindings: a variant that runs out of memory, hangs or dies is
// reported as such, named with its knob, and fails nothing; the fastest
// NCCL is then the default's.
func TestVariantFindings(t *testing.T) {
	ok := Result{Impl: NCCL, Branch: "-", Bytes: 1 << 20, Mode: ModeGraph, OK: true, MedianUS: 40}
	oom := Result{Impl: NCCL, Branch: "-", Variant: "buff1M", Bytes: 1 << 20, Mode: ModeGraph, Error: "DistBackendError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details), CUDA out of memory"}
	hang := Result{Impl: NCCL, Branch: "-", Variant: "Tree", Bytes: 1 << 20, Mode: ModeGraph, Error: "hang"}
	rep := NewReport(Options{Impls: []string{NCCL}, Sizes: []int{1 << 20}, Modes: []string{ModeGraph}}, Verify{Count: 122, Bytes: 1 << 20},
		&Run{Exit: "ok", Results: []Result{ok}}, "test")
	buff, _ := LookupVariant("buff1M")
	tree, _ := LookupVariant("Tree")
	rep.AddVariants([]*VariantRun{
		{Variant: buff, Sizes: []int{1 << 20}, Run: &Run{Exit: "exit status 1", Results: []Result{oom}}},
		{Variant: tree, Sizes: []int{1 << 20}, Run: &Run{Exit: "timeout", Results: []Result{hang}, Hang: &hang}},
	}, nil)
	f := strings.Join(rep.Findings, "\n")
	for _, want := range []string{
		"OOM nccl:buff1M (NCCL_BUFFSIZE=1048576) at 1M (graph): DistBackendError: NCCL error",
		"nccl:buff1M (NCCL_BUFFSIZE=1048576): the run ended badly: exit status 1",
		"HANG nccl:Tree (NCCL_ALGO=Tree) at 1M (graph): no result before the timeout; the variant's ranks were killed",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("findings lack %q:\n%s", want, f)
		}
	}
	if rep.Failed() {
		t.Error("a failed NCCL variant failed the report")
	}
	if best, ok := bestNCCL(rep.AllResults(), 1<<20, ModeGraph, "", false); !ok || best.Variant != "" {
		t.Errorf("fastest NCCL %+v", best)
	}
}

// TestBenchPyOnCPU runs bench.py itself, end to end through Execute, on
// the CPU shim of testdata/cpushim (torch.cuda answered on the CPU, the
// fake extension fake_ar.py summing over gloo): world size 4 on one
// "GPU", every implementation through both branches, two layouts, two
// dtypes, 4K and each cap, eager and graphs. It checks bench.py's own
// control flow (the probes, the forcing, the cases, the n/a and cap
// records) against what the report expects: nothing missing, nothing
// failed; then an extension from before the push kernels (UNSUPPORTED)
// and a push1 that writes nothing (WRONG). Opt in with
// ARPATCH_BENCHPY_CPU=/usr/bin/python3 (an interpreter with torch, e.g.
// Debian's python3-torch; about a minute on two cores): no GPU is
// involved, so nothing here is a measurement.
func TestBenchPyOnCPU(t *testing.T) {
	if os.Getenv("ARPATCH_BENCHPY_CPU") == "" {
		t.Skip("set ARPATCH_BENCHPY_CPU to a python3 with torch to run bench.py on the CPU shim")
	}
	py, err := filepath.Abs("testdata/cpushim/python3")
	if err != nil {
		t.Fatal(err)
	}
	ext, _ := filepath.Abs("testdata/cpushim/fake_ar.py")
	run := func(env ...string) *Report {
		opts := Options{Python: py, WorldSize: 4, Sizes: []int{4096}, Cap: true, Impls: KnownImpls, Branches: []string{"nvlink", "pcie"},
			Modes: KnownModes, DTypes: []string{BF16, FP32}, Layouts: []Islands{Consecutive(4, 2), Strided(4, 2)}, Ext: ext,
			Inner: 2, Reps: 1, Timeout: 5 * time.Minute, ProbeThresholds: true, Env: append(os.Environ(), env...)}
		r, err := Execute(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return NewReport(opts, Verify{Count: 122, Bytes: 4096}, r, "test")
	}
	rep := run()
	if rep.Failed() || len(rep.Missing) != 0 || rep.Run.Exit != "ok" || !rep.Run.AlgoProbe.Refused || !rep.Run.ThresholdProbe.Refused {
		t.Fatalf("failed %v, missing %v, exit %s, findings %q\n%s", rep.Failed(), rep.Missing, rep.Run.Exit, rep.Findings, strings.Join(rep.Run.Output, "\n"))
	}
	caps := map[string]int{}
	for _, r := range rep.Run.Results {
		if r.Cap && r.DType == BF16 && r.Mode == ModeGraph {
			caps[caseName(r)] = r.Bytes
		}
	}
	if caps["custom-push1/pcie"] != 2<<20 || caps["custom-island/pcie[0,2/1,3]"] != 2796192 || caps["custom-push2/pcie"] != 4194304 || caps["custom-2stage/nvlink"] != 8<<20 {
		t.Errorf("caps %v", caps)
	}
	rep = run("FAKE_EXT_OLD=1")
	if !rep.Failed() || !strings.HasPrefix(rep.Findings[0], "UNSUPPORTED push algorithms") {
		t.Errorf("old extension: failed %v, findings %q", rep.Failed(), rep.Findings)
	}
	rep = run("FAKE_EXT_WRONG=push1")
	var wrong []string
	for _, r := range rep.Run.Results {
		if r.Status() == "WRONG" && r.DType == BF16 && r.Mode == ModeEager {
			wrong = append(wrong, caseName(r)+" "+FormatBytes(r.Bytes))
		}
	}
	// custom-push1 and, where its schedule runs push1, nothing else: the
	// fake's auto is push2 at world size 4.
	if !rep.Failed() || !reflect.DeepEqual(wrong, []string{"custom-push1/pcie 4K", "custom-push1/pcie 2M"}) {
		t.Errorf("WRONG push1: %v", wrong)
	}
}

// TestBaselineNeverLL128OffNVLink: off NVLink, NCCL_PROTO=LL128 (an
// NVLinkOnly variant) is measured and shown but is never the baseline of a
// speed-up: not in the verify costs (JSON nccl_baseline), the table's
// fastest NCCL column and speed-ups, the SLOWER findings or BestCustom.
// Over NVLink it is the fastest NCCL like any other.
func TestBaselineNeverLL128OffNVLink(t *testing.T) {
	const n = 40 << 10
	nccl := Result{Impl: NCCL, Branch: "-", Bytes: n, Mode: ModeGraph, OK: true, MedianUS: 20}
	ll128 := Result{Impl: NCCL, Branch: "-", Variant: "LL128", Bytes: n, Mode: ModeGraph, OK: true, MedianUS: 1}
	push := Result{Impl: CustomPush1, Branch: "pcie", Bytes: n, Mode: ModeGraph, OK: true, MedianUS: 10}
	v, _ := LookupVariant("LL128")
	build := func(nvlink bool) *Report {
		rep := NewReport(Options{Impls: []string{NCCL, CustomPush1}, Sizes: []int{n}, Modes: []string{ModeGraph}, NVLink: nvlink},
			Verify{Count: 122, Bytes: n}, &Run{Exit: "ok", Results: []Result{nccl, push}}, "test")
		rep.AddVariants([]*VariantRun{{Variant: v, Sizes: []int{n}, Run: &Run{Exit: "ok", Results: []Result{ll128}}}}, nil)
		return rep
	}
	cost := func(rep *Report) Cost {
		for _, c := range rep.Costs {
			if c.Impl == CustomPush1 {
				return c
			}
		}
		t.Fatalf("no cost for custom-push1: %+v", rep.Costs)
		return Cost{}
	}
	table := func(rep *Report) string {
		var b strings.Builder
		rep.WriteTable(&b)
		return b.String()
	}

	off := build(false)
	if c := cost(off); c.Baseline != "nccl" || c.Speedup != 2 {
		t.Errorf("off NVLink: baseline %q speed-up %v, want nccl 2", c.Baseline, c.Speedup)
	}
	if tb := table(off); strings.Contains(tb, "vs nccl:LL128") || strings.Contains(tb, "nccl:LL128 1.0") || !strings.Contains(tb, "2.00x vs nccl") {
		t.Errorf("off NVLink, the table compares with LL128:\n%s", tb)
	}
	if f := strings.Join(off.Findings, "\n"); strings.Contains(f, "SLOWER") {
		t.Errorf("off NVLink, a finding compares with LL128:\n%s", f)
	}
	if _, us, ok := off.BestCustom(ModeGraph); !ok || us != 20 {
		t.Errorf("off NVLink, BestCustom's NCCL %v us, want 20", us)
	}
	if b, _ := json.Marshal(off); !strings.Contains(string(b), `"nccl_baseline":"nccl"`) || strings.Contains(string(b), `"nccl_baseline":"nccl:LL128"`) {
		t.Errorf("off NVLink JSON: %s", b)
	}

	on := build(true)
	if c := cost(on); c.Baseline != "nccl:LL128" || c.Speedup != 0.1 {
		t.Errorf("over NVLink: baseline %q speed-up %v, want nccl:LL128 0.1", c.Baseline, c.Speedup)
	}
	if tb := table(on); !strings.Contains(tb, "0.10x vs nccl:LL128") {
		t.Errorf("over NVLink, the table does not compare with LL128:\n%s", tb)
	}
	if f := strings.Join(on.Findings, "\n"); !strings.Contains(f, "SLOWER custom-push1/pcie (graph) takes 10.0 us at the verify size, the fastest NCCL 1.0 us (nccl:LL128)") {
		t.Errorf("over NVLink findings:\n%s", f)
	}
}
