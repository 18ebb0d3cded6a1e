package allreduce

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/ctxtest"
	"github.com/arpatch/arpatch/internal/testbin"
)

func TestParseSizesAndShape(t *testing.T) {
	got, err := ParseSizes("4K..64K, 42000, 1M, 4K")
	if err != nil {
		t.Fatal(err)
	}
	want := []int{4096, 8192, 16384, 32768, 42000, 65536, 1 << 20}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sizes %v, want %v", got, want)
	}
	if got, _ := ParseSizes("100"); got[0] != 112 {
		t.Errorf("100 bytes rounds to %d, want 112 (multiple of 16)", got[0])
	}
	for _, bad := range []string{"", "1M..4K", "12Q", "-4K", "0.5..1M", "4K,,8K", "1.5K", "0"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) accepted", bad)
		}
	}
	s, err := ParseShape("4x5120")
	if err != nil || s.Bytes() != 40960 || s.String() != "4 tokens x hidden 5120 x bf16 = 40K" {
		t.Errorf("shape %+v %v %q", s, err, s.String())
	}
	for _, bad := range []string{"4*5120", "0x5120", "4x-1"} {
		if _, err := ParseShape(bad); err == nil {
			t.Errorf("bad shape %q accepted", bad)
		}
	}
	// Up to MaxBytes of bf16, and no int overflow past it.
	if s, err := ParseShape("1024x536870912"); err != nil || s.Bytes() != MaxBytes {
		t.Errorf("1 TiB shape: %+v %v", s, err)
	}
	for _, big := range []string{"1025x536870912", "1000000x1000000", "99999999999999999x99999999", "4611686018427387904x4"} {
		if s, err := ParseShape(big); err == nil || !strings.Contains(err.Error(), "more than 1T bytes") {
			t.Errorf("ParseShape(%q) = %+v, %v; want the 1T refusal", big, s, err)
		}
	}
	for n, want := range map[int]string{40960: "40K", 1 << 20: "1M", 42000: "41.0K", 512: "512B"} {
		if FormatBytes(n) != want {
			t.Errorf("FormatBytes(%d) = %s, want %s", n, FormatBytes(n), want)
		}
	}
}

// TestNCCLTransportRecorded reads NCCL_DEBUG=INFO lines captured on the
// 2x H200 machine (NVLink: P2P over CUMEM, 24 channels).
func TestNCCLTransportRecorded(t *testing.T) {
	b, err := os.ReadFile("testdata/nccl-info-h200x2.txt")
	if err != nil {
		t.Fatal(err)
	}
	tr := ParseNCCLTransport(strings.Split(string(b), "\n"))
	if tr.Version != "2.28.9" || tr.Channels != 24 || tr.Transports["P2P"] == 0 || len(tr.Findings) != 0 {
		t.Errorf("transport = %+v", tr)
	}
	if !reflect.DeepEqual(tr.Details, []string{"P2P/CUMEM"}) {
		t.Errorf("details %v", tr.Details)
	}
	// Which rank runs on which GPU (nvidia-smi's index, NVML's), and each
	// connection once: rank 1 logged its first.
	if !reflect.DeepEqual(tr.Ranks, map[int]NCCLRank{0: {CUDADev: 0, NVMLDev: 0, BusID: "60"}, 1: {CUDADev: 1, NVMLDev: 1, BusID: "70"}}) ||
		!reflect.DeepEqual(tr.Links, []NCCLLink{{From: 1, To: 0, Via: "P2P/CUMEM"}, {From: 0, To: 1, Via: "P2P/CUMEM"}}) || tr.P2PDisabled != nil {
		t.Errorf("ranks %+v, links %+v, disabled %v", tr.Ranks, tr.Links, tr.P2PDisabled)
	}
	shm := ParseNCCLTransport([]string{
		"[rank0]: host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
		"host:1:1 [0] NCCL INFO 1 coll channels, 0 nvls channels",
	})
	if shm.Transports["SHM"] != 1 || len(shm.Findings) != 2 || !strings.Contains(shm.Findings[0], "~200 us") ||
		!reflect.DeepEqual(shm.Links, []NCCLLink{{From: 0, To: 1, Via: "SHM/direct/direct"}}) || shm.Links[0].Transport() != "SHM" {
		t.Errorf("SHM run: %+v", shm)
	}
	// NCCL's own line when NVML says a pair's P2P is not OK (Upstream:
	// NVIDIA/nccl src/graph/paths.cc@5067397c2676 (ncclTopoCheckP2p)).
	off := ParseNCCLTransport([]string{"host:1:1 [1] NCCL INFO P2P is disabled between connected GPUs 1 and 0. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1."})
	if !reflect.DeepEqual(off.P2PDisabled, [][2]int{{1, 0}}) {
		t.Errorf("disabled %v", off.P2PDisabled)
	}
}

// TestRecordedReport re-derives the verify costs and findings from the
// world-size-2 run recorded on 2x H200.
func TestRecordedReport(t *testing.T) {
	b, err := os.ReadFile("testdata/h200x2-ws2-report.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec Report
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Schema != Schema || len(rec.Run.Results) != 140 {
		t.Fatalf("schema %q, %d results", rec.Schema, len(rec.Run.Results))
	}
	for _, r := range rec.Run.Results {
		if r.Status() != "ok" || !r.Timed() {
			t.Errorf("recorded case not ok: %+v", r)
		}
	}
	costs := VerifyCosts(rec.Run.Results, rec.Verify, false)
	if len(costs) != 14 {
		t.Fatalf("%d costs, want 7 cases x 2 modes", len(costs))
	}
	for _, c := range costs {
		if math.Abs(c.TotalUS-c.PerCallUS*122) > 1e-6 {
			t.Errorf("%+v: total is not 122 x per call", c)
		}
		if c.Impl != NCCL && c.Speedup <= 1 {
			t.Errorf("%+v: custom allreduce was faster than NCCL on the H200 pair", c)
		}
	}
	var buf bytes.Buffer
	o := rec.Options
	opts := Options{WorldSize: o.WorldSize, Sizes: o.Sizes, Impls: o.Impls, Branches: o.Branches, Modes: o.Modes}
	rep := NewReport(opts, rec.Verify, rec.Run, "test")
	rep.WriteTable(&buf)
	out := buf.String()
	for _, want := range []string{"mode graph", "40K*", "custom-1stage/pcie", "predicted allreduce time per EAGLE-3 verify pass: 122 allreduces", "NCCL transport: P2P/CUMEM (24 channels)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if rep.Failed() || len(rep.Findings) != 0 {
		t.Errorf("failed %v findings %v", rep.Failed(), rep.Findings)
	}
	best, nccl, ok := rep.BestCustom("graph")
	if !ok || best.PerCallUS >= nccl {
		t.Errorf("best custom %+v vs NCCL %.1f", best, nccl)
	}

	// The same run missing its last two results (a rank that died quietly
	// after them): the cases are named and the run fails.
	cut := *rec.Run
	cut.Results = cut.Results[:len(cut.Results)-2]
	rep = NewReport(opts, rec.Verify, &cut, "test")
	last, prev := rec.Run.Results[139], rec.Run.Results[138]
	want := []string{
		caseName(prev) + " at " + FormatBytes(prev.Bytes) + " (" + prev.Mode + ")",
		caseName(last) + " at " + FormatBytes(last.Bytes) + " (" + last.Mode + ")",
	}
	if !rep.Failed() || !reflect.DeepEqual(rep.Missing, want) && !reflect.DeepEqual(rep.Missing, []string{want[1], want[0]}) {
		t.Errorf("missing %v, want %v", rep.Missing, want)
	}
	if f := strings.Join(rep.Findings, "\n"); !strings.Contains(f, "MISSING 2 of the cases asked for never reported a result") {
		t.Errorf("findings %v", rep.Findings)
	}
}

// NCCL on an oversubscribed run reports one skipped result for all its
// sizes and modes: nothing is missing.
func TestMissingCasesSkippedWhole(t *testing.T) {
	opts := Options{Impls: []string{NCCL, CustomAuto}, Branches: []string{"pcie"}, Sizes: []int{4096, 8192}, Modes: []string{"eager"}}
	res := []Result{
		{Impl: NCCL, Branch: "-", Skipped: true, Error: "NCCL does not allow two ranks on one GPU"},
		{Impl: CustomAuto, Branch: "pcie", Bytes: 4096, Mode: "eager", OK: true},
	}
	if got := MissingCases(opts, res); !reflect.DeepEqual(got, []string{"custom-auto/pcie at 8K (eager)"}) {
		t.Errorf("missing %v", got)
	}
}

func TestFindingsForBadRuns(t *testing.T) {
	v := Verify{Count: 122, Bytes: 40960}
	run := &Run{Exit: "timeout", Env: RunEnv{WorldSize: 4, Devices: 2, Oversubscribed: true}, Results: []Result{
		{Impl: NCCL, Branch: "-", Bytes: 40960, Mode: "eager", OK: true, MedianUS: 30},
		{Impl: CustomAuto, Branch: "pcie", Bytes: 40960, Mode: "eager", OK: false, Wrong: &Wrong{Rank: 0, Index: 0, Got: "nan", Want: "10.0", Mismatches: 20480, Of: 20480}},
		{Impl: Custom1Stage, Branch: "pcie", Bytes: 40960, Mode: "eager", OK: true, MedianUS: 45},
		{Impl: Custom2Stage, Branch: "pcie", Bytes: 40960, Mode: "graph", Error: "hang"},
	}}
	run.Hang = &run.Results[3]
	rep := NewReport(Options{}, v, run, "test")
	got := strings.Join(rep.Findings, "\n")
	for _, want := range []string{
		"WRONG custom-auto/pcie at 40K (eager): rank 0 element 0 is nan, want 10.0 (20480 of 20480 elements wrong)",
		"HANG custom-2stage/pcie at 40K (graph)",
		"oversubscribed: 4 ranks on 2 GPUs",
		"SLOWER custom-1stage/pcie (eager) takes 45.0 us at the verify size, the fastest NCCL 30.0 us (nccl): 50% slower",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("findings lack %q:\n%s", want, got)
		}
	}
	if !rep.Failed() {
		t.Error("a run with WRONG and HANG did not fail")
	}
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	if !strings.Contains(buf.String(), "WRONG") || !strings.Contains(buf.String(), "HANG") {
		t.Errorf("table:\n%s", buf.String())
	}
}

// fakeTorchrun writes a script standing in for python -m torch.distributed.run:
// it appends body to the --out file, then runs tail (shell).
func fakeTorchrun(t *testing.T, body, tail string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python3")
	script := "#!/bin/sh\nout=\"\"; prev=\"\"\nfor a in \"$@\"; do [ \"$prev\" = \"--out\" ] && out=$a; prev=$a; done\n" +
		"echo 'host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read'\n" +
		"cat >> \"$out\" <<'JSON'\n" + body + "JSON\n" + tail + "\n"
	if err := testbin.Write(p, []byte(script)); err != nil {
		t.Fatal(err)
	}
	return p
}

// onLine is an Options.Log that calls fn once the output holds line as a
// whole line. Execute writes to it from one goroutine.
type onLine struct {
	line   string
	fn     func()
	output strings.Builder
	called bool
}

func (w *onLine) Write(p []byte) (int, error) {
	w.output.Write(p)
	if !w.called && strings.Contains("\n"+w.output.String(), "\n"+w.line+"\n") {
		w.called = true
		w.fn()
	}
	return len(p), nil
}

func TestExecuteHangAndDeath(t *testing.T) {
	env := `{"event": "env", "world_size": 2, "devices": 2, "device": "Fake GPU"}` + "\n"
	ok := `{"event": "start", "impl": "nccl", "branch": "-", "bytes": 4096, "mode": "eager"}` + "\n" +
		`{"event": "result", "impl": "nccl", "branch": "-", "bytes": 4096, "mode": "eager", "ok": true, "median_us": 30.5, "p10_us": 30, "p90_us": 31}` + "\n"
	hang := `{"event": "start", "impl": "nccl", "branch": "-", "bytes": 4096, "mode": "graph"}` + "\n"

	// The fake ranks print ready once they have written the lines above,
	// then hang.
	const ready = "fake ranks: lines written"
	hangs := "echo '" + ready + "'; sleep 60"

	t.Run("hang", func(t *testing.T) {
		t.Parallel() // waits out a real timeout; overlaps the other wait
		py := fakeTorchrun(t, env+ok+hang, hangs)
		// The timeout must fall after the fake ranks have written their
		// lines (a few milliseconds; longer on a loaded machine): a run
		// whose ranks were stopped before they printed ready is tried
		// again with twice the timeout, up to a last try at 6.4 s. What is
		// checked does not depend on the timeout's length.
		const last = 6400 * time.Millisecond
		for timeout := 100 * time.Millisecond; ; timeout *= 2 {
			start := time.Now()
			run, err := Execute(context.Background(), Options{Python: py, WorldSize: 2, Sizes: []int{4096}, Impls: []string{NCCL}, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > timeout+18*time.Second {
				t.Errorf("the %s timeout did not stop the run (%s)", timeout, time.Since(start))
			}
			if !slices.Contains(run.Output, ready) && timeout < last {
				continue
			}
			if run.Exit != "timeout" || run.Hang == nil || run.Hang.Mode != "graph" || len(run.Results) != 2 || run.Results[1].Status() != "HANG" {
				t.Errorf("run = %+v", run)
			}
			if run.Env.Device != "Fake GPU" || run.NCCL.Transports["P2P"] != 1 {
				t.Errorf("env %+v nccl %+v", run.Env, run.NCCL)
			}
			break
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		t.Parallel() // a real process; overlaps the other wait
		// The caller's context ends first (Ctrl-C, or a deadline of its
		// own): the run says "interrupted", not "timeout", and keeps what
		// was read. The context ends once the fake ranks say they have
		// written their lines, as a deadline that passed: its Err is
		// DeadlineExceeded, which Execute must tell apart from its own
		// timeout's.
		py := fakeTorchrun(t, env+ok+hang, hangs)
		ctx, expire := ctxtest.Expiring()
		defer expire()
		run, err := Execute(ctx, Options{Python: py, WorldSize: 2, Sizes: []int{4096}, Impls: []string{NCCL}, Timeout: time.Hour, Log: &onLine{line: ready, fn: expire}})
		if err != nil {
			t.Fatal(err)
		}
		// The case in progress has no verdict: not an ERROR result, not
		// a hang, and its report is not failed.
		if run.Exit != "interrupted" || len(run.Results) != 1 || run.Hang != nil || run.Interrupted == nil || run.Interrupted.Impl != NCCL || run.Interrupted.Error != "" {
			t.Errorf("run = %+v", run)
		}
		rep := NewReport(Options{WorldSize: 2, Sizes: []int{4096}, Impls: []string{NCCL}, Modes: []string{"eager", "graph"}}, Verify{Count: 122, Bytes: 4096}, run, "test")
		want := []string{"INTERRUPTED during nccl at 4K (graph): the ranks were stopped; 1 of the cases asked for was not run (no verdict on them)"}
		if !rep.Interrupted() || rep.Failed() || !slices.Equal(rep.Findings[len(rep.Findings)-1:], want) || len(rep.Missing) != 1 {
			t.Errorf("report: interrupted %v, failed %v, missing %v, findings %q", rep.Interrupted(), rep.Failed(), rep.Missing, rep.Findings)
		}
		var tab strings.Builder
		rep.WriteTable(&tab)
		if !regexp.MustCompile(`(?m)^4K\*? +INTERRUPTED +$`).MatchString(tab.String()) || strings.Contains(tab.String(), "ERROR") {
			t.Errorf("table of an interrupted run:\n%s", tab.String())
		}
		run, err = Execute(ctx, Options{Python: py, WorldSize: 2, Sizes: []int{4096}, Impls: []string{NCCL}, Timeout: time.Hour})
		if err != nil || run.Exit != "interrupted" || len(run.Results) != 0 {
			t.Errorf("a run on a done context: %+v, %v", run, err)
		}
	})
	t.Run("rank dies", func(t *testing.T) {
		py := fakeTorchrun(t, env+ok+hang+`{"event": "result", "impl": "nccl", "broken`+"\n", "exit 1")
		run, err := Execute(context.Background(), Options{Python: py, WorldSize: 2, Sizes: []int{4096}, Impls: []string{NCCL}, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if run.Exit != "exit status 1" || run.BadLines != 1 || run.Hang == nil || !strings.HasPrefix(run.Hang.Error, "the run ended during this case") {
			t.Errorf("run = %+v", run)
		}
		rep := NewReport(Options{}, Verify{Count: 122, Bytes: 4096}, run, "test")
		if !rep.Failed() || !strings.Contains(strings.Join(rep.Findings, "\n"), "1 result lines could not be read") {
			t.Errorf("findings %v", rep.Findings)
		}
	})
	t.Run("command line", func(t *testing.T) {
		// Every count goes to bench.py, which has no defaults: a zero
		// Warmup is none, a zero Inner the default.
		args := torchrunArgs(Options{Python: "py", WorldSize: 4, Sizes: []int{4096, 40960}, Impls: []string{CustomAuto}, Branches: []string{"pcie"}, Modes: []string{"eager"}, Ext: "/x.so", Reps: 5}.resolved(), "b.py", "o.jsonl")
		want := "py -m torch.distributed.run --standalone --nproc-per-node 4 b.py --out o.jsonl --sizes 4096,40960 --impls custom-auto --branches pcie --modes eager --ext /x.so --warmup 0 --inner 20 --reps 5"
		if strings.Join(args, " ") != want {
			t.Errorf("args:\n%s\nwant\n%s", strings.Join(args, " "), want)
		}
		if o := (Options{}).resolved(); o.Python != "python3" || o.Warmup != 0 || o.Inner != DefaultInner || o.Reps != DefaultReps || o.Timeout != DefaultTimeout {
			t.Errorf("zero options resolve to %+v", o)
		}
	})
}

func loadRecorded(t *testing.T, name string) (*Report, Options) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var rec Report
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	o := rec.Options
	return &rec, Options{WorldSize: o.WorldSize, Sizes: o.Sizes, Impls: o.Impls, Branches: o.Branches, Modes: o.Modes}
}

// World size 4 on 4x H200 (2026-11-29): the patched tree
// gives the exact sum in all 140 cases, both branches, both modes, and
// custom allreduce beats NCCL at the verify size; the unpatched tree's
// PCIe branch (custom-auto, full_nvlink=false) launches nothing.
func TestRecordedWorldSize4(t *testing.T) {
	rec, opts := loadRecorded(t, "h200x4-ws4-report.json")
	e := rec.Run.Env
	if e.WorldSize != 4 || e.Devices != 4 || e.Oversubscribed || len(rec.Run.Results) != 140 {
		t.Fatalf("env %+v, %d results", e, len(rec.Run.Results))
	}
	rep := NewReport(opts, rec.Verify, rec.Run, "test")
	if rep.Failed() || len(rep.Missing) != 0 {
		t.Fatalf("failed %v, missing %v, findings %v", rep.Failed(), rep.Missing, rep.Findings)
	}
	for _, c := range rep.Costs {
		if c.Impl != NCCL && c.Speedup <= 1 {
			t.Errorf("%+v: not faster than NCCL on 4x H200", c)
		}
	}
	if best, nccl, ok := rep.BestCustom("graph"); !ok || nccl/best.PerCallUS < 2 {
		t.Errorf("graph: best custom %+v vs NCCL %.1f us", best, nccl)
	}

	base, bopts := loadRecorded(t, "h200x4-ws4-unpatched-report.json")
	brep := NewReport(bopts, base.Verify, base.Run, "test")
	var wrong []string
	for _, r := range base.Run.Results {
		if r.Status() == "WRONG" {
			wrong = append(wrong, caseName(r)+" "+FormatBytes(r.Bytes))
			if r.Wrong == nil || r.Wrong.Got != "nan" || r.Wrong.Mismatches != r.Wrong.Of {
				t.Errorf("%s: %+v, want every element NaN (no kernel ran)", caseName(r), r.Wrong)
			}
		}
	}
	if !brep.Failed() || !reflect.DeepEqual(wrong, []string{"custom-auto/pcie 4K", "custom-auto/pcie 40K", "custom-auto/pcie 1M"}) {
		t.Errorf("unpatched: failed %v, wrong %v", brep.Failed(), wrong)
	}
}

// NaN and Inf parse as floats but are no size: NaN passes "n <= 0".
func TestParseBytesRefusesNonFinite(t *testing.T) {
	for _, s := range []string{"NaN", "nanK", "Inf", "+infM", "1e300"} {
		if n, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", s, n)
		}
	}
}

// TestReadResultsRefusesUndecodableLines: an env or threshold-probe line
// whose fields do not decode counts as a bad line, and such a probe is no
// probe: left empty, it would read as "took it" (Refused false).
func TestReadResultsRefusesUndecodableLines(t *testing.T) {
	lines := `{"event": "env", "world_size": "two"}
{"event": "threshold_probe", "variable": "SGLANG_X", "refused": "yes"}
`
	var run Run
	if err := readResults([]byte(lines), &run); err != nil {
		t.Fatal(err)
	}
	if run.BadLines != 2 || run.ThresholdProbe != nil {
		t.Errorf("bad lines %d, probe %+v; want 2 and no probe", run.BadLines, run.ThresholdProbe)
	}
	good := `{"event": "threshold_probe", "variable": "SGLANG_X", "value": "1", "refused": true}` + "\n"
	run = Run{}
	if err := readResults([]byte(good), &run); err != nil {
		t.Fatal(err)
	}
	if run.BadLines != 0 || run.ThresholdProbe == nil || !run.ThresholdProbe.Refused || run.ThresholdProbe.Variable != "SGLANG_X" {
		t.Errorf("a good probe: bad lines %d, probe %+v", run.BadLines, run.ThresholdProbe)
	}
}

func TestModesError(t *testing.T) {
	for _, c := range []struct {
		modes []string
		want  string
	}{
		{[]string{"eager"}, ""},
		{[]string{"graph", "eager"}, ""},
		{nil, "is empty: use eager, graph"},
		{[]string{"eager", "cuda-graph"}, `"cuda-graph": use eager, graph`},
	} {
		err := ModesError(c.modes)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("ModesError(%q) = %v, want %q", c.modes, err, c.want)
		}
	}
}

// Python puts a script's directory first on sys.path, so every rank
// imports whatever torch.py lies beside bench.py. The script Execute runs
// must sit in a directory of its own that only this user can write, not
// in the shared temp dir (where any local user can plant a torch.py).
func TestExecuteScriptDirIsPrivate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "python3")
	// The fake ranks print the directory holding the .py argument and its
	// mode while the run is in progress (Execute removes it after).
	script := "#!/bin/sh\nfor a in \"$@\"; do case $a in *.py) d=$(dirname \"$a\");; esac; done\n" +
		"echo \"dir $d\"; stat -c 'mode %a' \"$d\"\n"
	if err := testbin.Write(p, []byte(script)); err != nil {
		t.Fatal(err)
	}
	run, err := Execute(context.Background(), Options{Python: p, WorldSize: 2, Sizes: []int{4096}, Impls: []string{NCCL}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var dir, mode string
	for _, l := range run.Output {
		if d, ok := strings.CutPrefix(l, "dir "); ok {
			dir = d
		}
		if m, ok := strings.CutPrefix(l, "mode "); ok {
			mode = m
		}
	}
	perm, err := strconv.ParseUint(mode, 8, 32)
	if dir == "" || err != nil {
		t.Fatalf("the fake ranks did not report the script's directory: %q", run.Output)
	}
	if filepath.Clean(dir) == filepath.Clean(os.TempDir()) || perm&0o022 != 0 {
		t.Errorf("the script ran from %s (mode %s): a directory others can write, where a planted torch.py would be imported by every rank", dir, mode)
	}
}

// A bench allreduce log holds the run of NCCL as the environment left it,
// then each variant's after its line: MainRun is the first.
func TestMainRun(t *testing.T) {
	lines := []string{"a", "b", VariantLogPrefix + "nccl:P2P-SYS: NCCL_P2P_LEVEL=SYS", "c"}
	if got := MainRun(lines); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("MainRun = %q", got)
	}
	if got := MainRun(lines[:2]); len(got) != 2 {
		t.Errorf("a log without variants: %q", got)
	}
}
