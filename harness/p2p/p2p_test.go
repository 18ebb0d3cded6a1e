package p2p

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/traffic"
	"github.com/arpatch/arpatch/internal/testbin"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// host reads a host recorded in nvidia-smi's formats
// (harness/doctor/testdata/NAME): its GPUs and topology.
func host(t *testing.T, name string) ([]nvsmi.GPU, *nvsmi.Topology) {
	t.Helper()
	dir := filepath.Join("..", "doctor", "testdata", name)
	q, err := os.ReadFile(filepath.Join(dir, "query-gpu.csv"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(dir, "topo-m.txt"))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := nvsmi.ParseQueryGPU(string(q))
	if err != nil {
		t.Fatal(err)
	}
	topo, err := nvsmi.ParseTopoMatrix(string(m))
	if err != nil {
		t.Fatal(err)
	}
	return gpus, topo
}

func TestPatterns(t *testing.T) {
	names := func(ps []Pattern) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Kind+":"+textfmt.Ints(p.Ranks, ","))
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct{ host, want, first string }{
		// Two sockets, two switches of two GPUs each per socket: every
		// switch, every socket, then all across the sockets.
		{"pcie8", "switch:0,1 switch:2,3 switch:4,5 switch:6,7 socket:0,1,2,3 socket:4,5,6,7 cross-socket:0,1,2,3,4,5,6,7", "switch GPU0,GPU1"},
		// Four GPUs behind one switch: the switch is all of them.
		{"switch4", "switch:0,1,2,3", "switch GPU0-GPU3"},
		// An NVLink pair.
		{"h200x2", "nvlink:0,1", "nvlink GPU0,GPU1"},
		// NVLinked in pairs, sockets of four.
		{"nvpairs8", "nvlink:0,1 nvlink:2,3 nvlink:4,5 nvlink:6,7 socket:0,1,2,3 socket:4,5,6,7 cross-socket:0,1,2,3,4,5,6,7", "nvlink GPU0,GPU1"},
	} {
		gpus, topo := host(t, c.host)
		ps := Patterns(topo, len(gpus))
		if got := names(ps); got != c.want || ps[0].Name != c.first {
			t.Errorf("%s: patterns %s (first named %q)\nwant %s (%q)", c.host, got, ps[0].Name, c.want, c.first)
		}
	}
	if ps := Patterns(nil, 3); names(ps) != "all:0,1,2" || ps[0].Name != "all rank 0,1,2" {
		t.Errorf("no topology: %+v", ps)
	}
	if ps := Patterns(nil, 1); ps != nil {
		t.Errorf("one GPU: %+v", ps)
	}
}

func TestLinks(t *testing.T) {
	gpus, topo := host(t, "pcie8")
	for _, c := range []struct {
		a, b  int
		label string
	}{{0, 1, "PCIe PIX (one switch)"}, {0, 2, "PCIe NODE (between host bridges of one socket)"}, {0, 4, "PCIe SYS (across sockets)"}} {
		if l := PairLink(topo, gpus, c.a, c.b); l.Label != c.label || l.Kind != "PCIe" || l.NominalGBps != 16*3.938 {
			t.Errorf("GPU%d-GPU%d: %+v", c.a, c.b, l)
		}
	}
	// The nominal rate is the link's most "possible with this GPU and
	// system" (gen and width max): GPU5's x8 is its current width, an
	// x16 slot; doctor's gpu.pcie-width finding names the narrowed link.
	if l := PairLink(topo, gpus, 4, 5); l.NominalGBps != 16*3.938 || !strings.Contains(l.Basis, "PCIe Gen5 x16 (63.0 GB/s)") {
		t.Errorf("GPU4-GPU5: %+v", l)
	}
	h2, t2 := host(t, "h200x2")
	if l := PairLink(t2, h2, 0, 1); l.Kind != "NVLink" || l.Label != "NVLink NV18" || l.NominalGBps != 450 {
		t.Errorf("H200 pair: %+v", l)
	}
	if l := HostLink(h2[0]); l.Label != "PCIe Gen5 x16 (63.0 GB/s)" || l.NominalGBps != 16*3.938 {
		t.Errorf("H200 host link: %+v", l)
	}
	narrow := nvsmi.GPU{PCIeGenMax: 4, PCIeWidthMax: 8}
	if r, s := PCIeLink(narrow); r != 8*1.969 || s != "PCIe Gen4 x8 (15.8 GB/s)" {
		t.Errorf("Gen4 x8: %v %q", r, s)
	}
	if r, _ := PCIeLink(nvsmi.GPU{}); r != 0 {
		t.Errorf("unknown link: %v", r)
	}
}

// stub returns Options that run the real p2p.py on its stub device, in
// one process (testdata/stubranks.sh), with the stub's faults; the test
// is skipped without a python3.
func stub(t *testing.T, hostName string, n int, faults ...string) Options {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 to run p2p.py on its stub device")
	}
	gpus, topo := host(t, hostName)
	var names []string
	var buses []string
	for _, g := range gpus[:n] {
		names = append(names, fmt.Sprintf("GPU%d", g.Index))
		buses = append(buses, g.BusID)
	}
	b, err := os.ReadFile("testdata/stubranks.sh")
	if err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(t.TempDir(), "python3")
	if err := testbin.Write(py, b); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "P2P_STUB="+strings.Join(faults, " "), "P2P_STUB_BUS_IDS="+strings.Join(buses, ","))
	return Options{Python: py, GPUs: gpus[:n], Topology: topo.Sub(names), Sizes: []int{1024, 4096}, PatternBytes: 1024,
		Reps: 3, MinRepBytes: 1, Timeout: time.Minute, Env: env}
}

func execute(t *testing.T, o Options) *Report {
	t.Helper()
	run, err := Execute(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if run.Exit != "ok" {
		t.Fatalf("the stub run failed (%s):\n%s", run.Exit, strings.Join(run.Output, "\n"))
	}
	return NewReport(o, run, "test")
}

func findings(rep *Report, id string) []string {
	var out []string
	for _, f := range rep.Findings {
		if f.ID == id {
			out = append(out, f.Text)
		}
	}
	return out
}

// Four GPUs behind one switch, every transfer exact: every pair, both
// directions at each size, latencies, the host links and the pattern, all
// checked, and a verdict that says so.
func TestStubExact(t *testing.T) {
	t.Parallel()
	o := stub(t, "switch4", 4)
	rep := execute(t, o)
	if rep.Failed() || len(rep.Corrupt) != 0 || !rep.Run.Done {
		t.Fatalf("an exact run failed: %+v", rep.Findings)
	}
	if len(rep.Pairs) != 12 || len(rep.HostLinks) != 4 || len(rep.Patterns) != 3 {
		t.Fatalf("%d pairs, %d host links, %d patterns", len(rep.Pairs), len(rep.HostLinks), len(rep.Patterns))
	}
	for _, p := range rep.Pairs {
		if len(p.Read) != 2 || len(p.Write) != 2 || p.FlagRTTUS == nil || p.ReadLatencyUS == nil || p.Link.Label != "PCIe PIX (one switch)" {
			t.Errorf("pair %+v", p)
		}
		// The stub's rate: 40 GB/s (its default), for reads and writes.
		if p.Read[1].Bytes != 4096 || p.Read[1].GBps.Median != 40 || p.Write[0].GBps.N != 3 || p.FlagRTTUS.Median != 2 || p.ReadLatencyUS.Median != 1.5 {
			t.Errorf("pair GPU%d-GPU%d figures: read %+v write %+v rtt %+v", p.GPU, p.Peer, p.Read, p.Write, p.FlagRTTUS)
		}
	}
	// Every byte was checked: reads at each launch (a warm-up and 3 reps
	// of one launch), writes at each rep's slot (a warm-up rep and 3).
	checked := map[string]int64{}
	for _, r := range rep.Run.Results {
		for _, c := range r.Checks {
			checked[r.Test+"/"+r.Op] += c.CheckedBytes
			if c.BadWords != 0 {
				t.Errorf("a bad word in %+v", r)
			}
		}
	}
	if checked["pair/read"] != 12*4*(1024+4096) || checked["pair/write"] != 12*4*(1024+4096) || checked["host/load"] != 4*4*(1024+4096) ||
		checked["pattern/read"] != 12*4*1024 || checked["pattern/write"] != 12*4*1024 || checked["pattern/read_latency"] != 12*4*4*(16+200) {
		t.Errorf("bytes checked: %v", checked)
	}
	if a := rep.Asymmetries(); len(a) != 1 || a[0].Kind != KindSwitch || a[0].ReadGBps != a[0].WriteGBps {
		t.Errorf("asymmetries %+v", a)
	}
	want := "4 GPUs, every pair PCIe PIX (one switch), every byte checked and exact: pairs alone: read 40.0 GB/s at 4K, write 40.0 GB/s at 4K; flag round trip 2.00 µs; all-to-all switch GPU0-GPU3: read 40.0 GB/s per GPU, write 40.0 (within 25%: pull and push move bytes alike here)"
	if rep.Verdict != want {
		t.Errorf("verdict\n%s\nwant\n%s", rep.Verdict, want)
	}
	var tab strings.Builder
	rep.WriteTable(&tab)
	for _, re := range []string{
		`(?m)^read \(loads from the peer\):$`,
		`(?m)^ +GPU0 +- +40\.0 +40\.0 +40\.0 *$`,
		`(?m)^ +GPU3 +2\.00/1\.50 +2\.00/1\.50 +2\.00/1\.50 +- *$`,
		`(?m)^  GPU0-GPU1  PCIe PIX \(one switch\), 63\.0 GB/s nominal$`,
		`(?m)^  switch GPU0-GPU3 +40\.0 \(40\.0-40\.0\) +40\.0 \(40\.0-40\.0\) +4\.00 \(4\.00-4\.00\)$`,
		`(?m)^verdict: 4 GPUs, every pair PCIe PIX`,
	} {
		if !regexp.MustCompile(re).MatchString(tab.String()) {
			t.Errorf("table lacks %s:\n%s", re, tab.String())
		}
	}
	// The JSON reads back as a report.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "p2p.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := Load(p)
	if err != nil || back.Verdict != rep.Verdict || len(back.Pairs) != 12 {
		t.Errorf("Load: %v, %+v", err, back)
	}
}

// A stubbed transfer that corrupts bytes fails the measurement: GPU1's
// stores into GPU2 (word 7 of each slot has a flipped bit), GPU0's loads
// from GPU3 as they arrive, and what a pattern moves between them; a
// slow pair is named with its link, and a flag that never arrives is an
// error, not a hang.
func TestStubCorrupt(t *testing.T) {
	t.Parallel()
	o := stub(t, "switch4", 4, "--stub-corrupt", "write:1:2", "--stub-corrupt", "read:0:3", "--stub-corrupt", "flag:2:3", "--stub-rate", "read:1:0:12")
	rep := execute(t, o)
	if !rep.Failed() {
		t.Fatal("a run whose bytes came back wrong did not fail")
	}
	bad := findings(rep, "p2p.corrupt")
	want := []string{
		"P2P reports OK but corrupts data: GPU0's loads from GPU3 (PCIe PIX (one switch), pair at 1K): 4 of 1024 words wrong (the first at word 7: ",
		"P2P reports OK but corrupts data: GPU1's stores to GPU2 (PCIe PIX (one switch), pair at 4K): 4 of 4096 words wrong (the first at word 7: ",
		"P2P reports OK but corrupts data: GPU0's loads from GPU3 (PCIe PIX (one switch), all-to-all switch GPU0-GPU3, 1K per peer): 4 of 1024 words wrong",
		"P2P reports OK but corrupts data: GPU1's stores to GPU2 (PCIe PIX (one switch), all-to-all switch GPU0-GPU3, 1K per peer): 4 of 1024 words wrong",
	}
	for _, w := range want {
		if !slices.ContainsFunc(bad, func(s string) bool {
			return strings.HasPrefix(s, w) && strings.HasSuffix(s, "custom allreduce must not run there (serve with --disable-custom-all-reduce)")
		}) {
			t.Errorf("no corruption finding %q in\n%s", w, strings.Join(bad, "\n"))
		}
	}
	// 1024 and 4096 bytes, pairs and patterns, both faults: 6 checks.
	if len(rep.Corrupt) != 6 || len(bad) != 6 {
		t.Errorf("%d corruptions, %d findings: %+v", len(rep.Corrupt), len(bad), rep.Corrupt)
	}
	if !strings.HasPrefix(rep.Verdict, "CORRUPT: P2P reports OK but corrupts data between GPU0 and GPU3 (PCIe PIX (one switch)): custom allreduce must not run there (6 checks found bytes wrong)") {
		t.Errorf("verdict %q", rep.Verdict)
	}
	slow := findings(rep, "p2p.slow")
	if len(slow) != 1 || slow[0] != "GPU1 <- GPU0: read at 4K: 12.0 GB/s, 19% of its link, PCIe PIX (one switch) (PCIe Gen5 x16 (63.0 GB/s), the narrower of the two GPUs' links)" {
		t.Errorf("slow findings %q", slow)
	}
	errs := findings(rep, "p2p.error")
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "flag round trip GPU2 <-> GPU3: no answer within 5s") {
		t.Errorf("errors %q", errs)
	}
}

// One GPU has no peer: the report says what cannot be measured and
// measures the GPU's link to pinned host memory.
func TestStubOneGPU(t *testing.T) {
	t.Parallel()
	o := stub(t, "h200x2", 1, "--stub-rate", "read:0:host:47.8", "--stub-rate", "write:0:host:49.7")
	rep := execute(t, o)
	if rep.Failed() || len(rep.Pairs) != 0 || len(rep.Patterns) != 0 || len(rep.HostLinks) != 1 {
		t.Fatalf("one GPU: %+v", rep)
	}
	h := rep.HostLinks[0]
	if h.Link.Label != "PCIe Gen5 x16 (63.0 GB/s)" || len(h.Load) != 2 || fmt.Sprintf("%.3f %.3f", h.Load[1].GBps.Median, h.Store[1].GBps.Median) != "47.800 49.700" || h.ReadLatencyUS == nil {
		t.Errorf("host link %+v", h)
	}
	if len(rep.Unmeasured) != 1 || !strings.Contains(rep.Unmeasured[0], "one GPU (GPU0, NVIDIA H200) has no peer: P2P read and write bandwidth") {
		t.Errorf("unmeasured %q", rep.Unmeasured)
	}
	want := "1 GPU (GPU0, NVIDIA H200): no peer, so no P2P pair or all-to-all pattern can be measured here; its link to pinned host memory, every byte checked and exact: GPU0 (PCIe Gen5 x16 (63.0 GB/s)) loads 47.8 at 1K, 47.8 at 4K stores 49.7 at 1K, 49.7 at 4K GB/s"
	if rep.Verdict != want {
		t.Errorf("verdict\n%s\nwant\n%s", rep.Verdict, want)
	}
}

// A pair whose memory cannot be mapped is an error, and its tests are not
// run; the two H200s are an NVLink pair.
func TestStubUnmapped(t *testing.T) {
	t.Parallel()
	o := stub(t, "h200x2", 2, "--stub-corrupt", "ipc:1:0")
	rep := execute(t, o)
	ipc := findings(rep, "p2p.ipc")
	if len(ipc) != 1 || ipc[0] != "GPU1 mapping GPU0's memory (cuIpcOpenMemHandle): CudaError: cuIpcOpenMemHandle: CUDA error 217: peer access is not supported between these two devices" {
		t.Errorf("ipc findings %q", ipc)
	}
	errs := findings(rep, "p2p.error")
	// The flag round trip, GPU1's dependent loads, its reads and writes
	// at both sizes and the three patterns.
	if len(errs) != 9 || !strings.Contains(errs[0], "not run: GPU rank 1 could not map rank 0's memory") {
		t.Errorf("errors %q", errs)
	}
	if len(rep.Pairs) != 2 || rep.Pairs[0].Link.Label != "NVLink NV18" || len(rep.Pairs[0].Read) != 2 || len(rep.Pairs[1].Read) != 0 {
		t.Errorf("pairs %+v", rep.Pairs)
	}
	if !rep.Failed() || !strings.HasPrefix(rep.Verdict, "FAILED: GPU1 mapping GPU0's memory") {
		t.Errorf("verdict %q", rep.Verdict)
	}
}

// fakeTorchrun is a python3 that appends records to --out, then runs tail.
func fakeTorchrun(t *testing.T, records, tail string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python3")
	script := "#!/bin/sh\nprev=\nfor a in \"$@\"; do [ \"$prev\" = --out ] && out=$a; prev=$a; done\n" +
		"cat >> \"$out\" <<'JSON'\n" + records + "JSON\n" + tail + "\n"
	if err := testbin.Write(p, []byte(script)); err != nil {
		t.Fatal(err)
	}
	return p
}

// A run that hangs names its case; one whose rank dies says so; records
// cut by a kill are counted; ranks on other GPUs than planned are named.
func TestRunEnds(t *testing.T) {
	gpus, topo := host(t, "h200x2")
	env := `{"event": "env", "world_size": 2, "ranks": [{"device": "NVIDIA H200", "bus_id": "0000:00:06.0", "self_check": ""}, {"device": "NVIDIA H200", "bus_id": "0000:00:05.0", "self_check": ""}]}` + "\n"
	started := `{"event": "start", "test": "pair", "op": "write", "rank": 0, "peer": 1, "bytes": 4096}` + "\n"
	o := Options{GPUs: gpus, Topology: topo, Sizes: []int{4096}, PatternBytes: 4096, Timeout: 3 * time.Second}
	t.Run("hang", func(t *testing.T) {
		t.Parallel()
		o := o
		o.Python = fakeTorchrun(t, env+started, "exec sleep 60")
		run, err := Execute(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		rep := NewReport(o, run, "test")
		if run.Exit != "timeout" || run.Hang == nil || run.Hang.Op != OpWrite || !rep.Failed() {
			t.Fatalf("run %+v", run)
		}
		errs := strings.Join(findings(rep, "p2p.error"), "\n")
		if !strings.Contains(errs, "GPU0 writes to GPU1, 4K: hang: the run timed out during this case") {
			t.Errorf("findings %q", errs)
		}
		if order := findings(rep, "p2p.rank-order"); len(order) != 1 || !strings.HasPrefix(order[0], "rank 1 ran on the GPU at bus 0000:00:05.0, not on GPU1 (00000000:00:07.0)") {
			t.Errorf("rank order: %q", order)
		}
	})
	t.Run("death", func(t *testing.T) {
		t.Parallel()
		o := o
		o.Python = fakeTorchrun(t, env+started+`{"event": "result", "test": "pa`+"\n", "exit 3")
		run, err := Execute(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		rep := NewReport(o, run, "test")
		errs := strings.Join(findings(rep, "p2p.error"), "\n")
		if run.BadLines != 1 || !strings.Contains(errs, "the run ended during this case: exit status 3") || !strings.Contains(errs, "1 of the probe's records could not be read") {
			t.Errorf("run %+v: %q", run, errs)
		}
	})
	t.Run("command line", func(t *testing.T) {
		o := o
		o.Python = "py"
		got := strings.Join(o.resolved().argv("p2p.py", "o.jsonl"), " ")
		want := "py -m torch.distributed.run --standalone --nproc-per-node 2 p2p.py --out o.jsonl --sizes 4096 --pattern-bytes 4096 --patterns nvlink GPU0,GPU1:0,1 --reps 10 --min-rep-bytes 33554432 --device-timeout 5"
		if got != want {
			t.Errorf("argv\n%s\nwant\n%s", got, want)
		}
		if _, err := Execute(context.Background(), Options{GPUs: gpus, Sizes: []int{100}, PatternBytes: 16}); err == nil || !strings.Contains(err.Error(), "100 bytes: sizes must be positive multiples of 16") {
			t.Errorf("a bad size: %v", err)
		}
	})
}

// synthetic is a run on the 8-GPU PCIe host (two sockets, two switches of
// two GPUs each per socket), built record by record: each pair's writes
// alone (PIX 45 GB/s, NODE 44, SYS 40) and flag round trips (PIX 1.0 µs,
// others 1.2), and the patterns' times per GPU (1 MB per peer).
func synthetic(t *testing.T) Options {
	gpus, topo := host(t, "pcie8")
	return Options{GPUs: gpus, Topology: topo, Sizes: []int{64 << 20}, PatternBytes: 1e6, Reps: 3}
}

func syntheticRun(o Options) *Run {
	run := &Run{Exit: "ok", Done: true}
	cell := func(a, b int) string { return o.Topology.Links[o.Topology.GPUs[a]][b] }
	for a := range 8 {
		for b := range 8 {
			if a == b {
				continue
			}
			w, rtt := map[string]float64{"PIX": 45, "NODE": 44, "SYS": 40}[cell(a, b)], 1.2
			if cell(a, b) == "PIX" {
				rtt = 1.0
			}
			run.Results = append(run.Results,
				Result{Test: TestPair, Op: OpWrite, Rank: a, Peer: b, Bytes: 64 << 20, SamplesGBps: []float64{w, w, w}},
				Result{Test: TestPair, Op: OpRead, Rank: a, Peer: b, Bytes: 64 << 20, SamplesGBps: []float64{w - 5, w - 5, w - 5}})
			if a < b {
				run.Results = append(run.Results, Result{Test: TestLatency, Op: OpFlagRTT, Rank: a, Peer: b, SamplesUS: []float64{rtt, rtt, rtt}})
			}
		}
	}
	us := map[string]map[string]float64{ // per kind and op: each GPU's time per rep
		KindSwitch: {OpRead: 50, OpWrite: 25, OpReadLatency: 3},
		KindSocket: {OpRead: 1000, OpWrite: 100, OpReadLatency: 5},
		KindCross:  {OpRead: 4000, OpWrite: 500, OpReadLatency: 8},
	}
	for _, p := range Patterns(o.Topology, 8) {
		for _, op := range []string{OpRead, OpWrite, OpReadLatency} {
			r := Result{Test: TestPattern, Op: op, Name: p.Name, Ranks: p.Ranks, Bytes: o.PatternBytes, PerRankUS: map[string][]float64{}}
			for _, x := range p.Ranks {
				v := us[p.Kind][op]
				r.PerRankUS[fmt.Sprint(x)] = []float64{v, v, v}
			}
			run.Results = append(run.Results, r)
		}
	}
	return run
}

// The model takes the host's measured constants, each from what the
// report says it is; the rest stay calibrated.
func TestModelParams(t *testing.T) {
	o := synthetic(t)
	rep := NewReport(o, syntheticRun(o), "test")
	base := traffic.Default()
	p, consts := rep.ModelParams(base, "p2p.json")
	got := map[string]float64{}
	for _, c := range consts {
		got[c.Field] = c.Value
	}
	near := func(field string, v, want float64) {
		t.Helper()
		if math.Abs(v-want) > 1e-9*math.Max(1, want) || math.Abs(got[field]-want) > 1e-9*math.Max(1, want) {
			t.Errorf("%s = %v (listed %v), want %v", field, v, got[field], want)
		}
	}
	// A PIX pair's writes over its link: 45 of 16 x 3.938 GB/s.
	near("pcie_efficiency", p.PCIeEfficiency, 45/(16*3.938))
	near("kernel_store_efficiency", p.KernelStoreEfficiency, 1)
	// NVLink was not measured: the calibrated rate, the same per link.
	near("nvlink_gbps", p.NVLinkGBps, base.NVLinkGBps*base.PCIeEfficiency/p.PCIeEfficiency)
	// Half the median round trip: 48 of the 56 ordered pairs take 1.2 µs.
	near("barrier_us", p.BarrierUS, 0.6)
	// A socket's write pattern: 12 pairs x 1 MB in 100 µs, 8 of them across
	// its root complex (NODE): 80 GB/s.
	near("root_complex_write_gbps", p.RootComplexWriteGBps, 80)
	// All 8 reading across the sockets: 56 MB in 4 ms; into each socket 24
	// reads cross its root complex (2 NODE and 4 SYS peers per GPU): 6 GB/s.
	near("root_complex_read_gbps", p.RootComplexReadGBps, 6)
	// All 8 writing: 16 of the 56 cross into each socket: 56 MB / 0.5 ms x 16/56.
	near("inter_socket_gbps", p.InterSocketGBps, 32)
	near("read_round4_us", p.ReadRound4US, 5)
	near("read_round8_us", p.ReadRound8US, 8)
	if len(consts) != 9 || !strings.HasPrefix(p.Source, "measured: p2p.json (host unnamed, ") {
		t.Errorf("%d constants, source %q: %+v", len(consts), p.Source, consts)
	}
	if p.CustomFixedUS != base.CustomFixedUS || p.NVLinkBarrierUS != base.NVLinkBarrierUS || p.NCCLStepUS != base.NCCLStepUS {
		t.Errorf("a constant the probe does not measure changed: %+v", p)
	}
	if c := consts[0]; c.String() != "pcie_efficiency 0.7142 (calibrated 0.857)" || !strings.Contains(c.From, "8 PIX pairs") {
		t.Errorf("first constant %q from %q", c, c.From)
	}
	// The asymmetry that decides pull against push, as the model now has it.
	if r, w := p.RootComplexReadGBps, p.RootComplexWriteGBps*p.KernelStoreEfficiency; w/r < 13 {
		t.Errorf("read %v against write %v GB/s", r, w)
	}
	// One group size (4 GPUs behind one switch): the line is shifted.
	g4, t4 := host(t, "switch4")
	o4 := Options{GPUs: g4, Topology: t4, PatternBytes: 16}
	run := &Run{Exit: "ok", Done: true, Results: []Result{{Test: TestPattern, Op: OpReadLatency, Ranks: []int{0, 1, 2}, Name: "x", PerRankUS: map[string][]float64{"0": {3.75}}}}}
	o4.Topology = o4.Topology.Sub([]string{"GPU0", "GPU1", "GPU2"})
	o4.GPUs = o4.GPUs[:3]
	p3, c3 := NewReport(o4, run, "test").ModelParams(base, "f")
	if d := base.ReadRoundUS(3); len(c3) != 2 || math.Abs(p3.ReadRoundUS(3)-3.75) > 1e-9 || math.Abs(p3.ReadRound8US-base.ReadRound8US-(3.75-d)) > 1e-9 {
		t.Errorf("3 GPUs: %+v %+v", p3, c3)
	}
	// Nothing from a report that found corrupt data.
	rep.Corrupt = []Corruption{{}}
	if p, c := rep.ModelParams(base, "p2p.json"); len(c) != 0 || p != base {
		t.Errorf("a corrupt report gave constants %+v", c)
	}
	if !rep.Covers(o.GPUs[2:5]) || rep.Covers([]nvsmi.GPU{{BusID: "00000000:01:00.0"}}) {
		t.Error("Covers")
	}
}
