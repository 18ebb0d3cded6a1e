package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/kernels"
)

// recorded answers commands from testdata/<host>/: nvidia-smi's outputs as
// files, and canned answers for python and cuobjdump.
func recorded(t *testing.T, host string, extra map[string]string) Runner {
	t.Helper()
	files := map[string]string{
		"nvidia-smi --query-gpu": "query-gpu.csv",
		"nvidia-smi topo -m":     "topo-m.txt",
		"nvidia-smi topo -p2p r": "topo-p2p-r.txt",
		"nvidia-smi topo -p2p w": "topo-p2p-w.txt",
	}
	return func(ctx context.Context, name string, args ...string) (string, error) {
		cmd := name + " " + strings.Join(args, " ")
		for prefix, file := range files {
			if strings.HasPrefix(cmd, prefix) {
				b, err := os.ReadFile(filepath.Join("testdata", host, file))
				if err != nil {
					t.Fatal(err)
				}
				return string(b), nil
			}
		}
		for prefix, out := range extra {
			if strings.HasPrefix(cmd, prefix) {
				return out, nil
			}
		}
		return "", errors.New("not recorded: " + cmd)
	}
}

func ids(rep *Report) map[string]Finding {
	m := map[string]Finding{}
	for _, f := range rep.Findings {
		m[f.ID] = f
	}
	return m
}

// TestRecordedH200 parses the outputs captured on the 2x H200 GPU machine
// and compares with the doctor --json recorded there.
func TestRecordedH200(t *testing.T) {
	b, err := os.ReadFile("testdata/h200x2/doctor.json")
	if err != nil {
		t.Fatal(err)
	}
	var want Report
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	rep := Inspect(context.Background(), Options{Run: recorded(t, "h200x2", nil)})
	h := rep.Host
	if !reflect.DeepEqual(h.GPUs, want.Host.GPUs) || !reflect.DeepEqual(h.Topology, want.Host.Topology) ||
		!reflect.DeepEqual(h.P2PRead, want.Host.P2PRead) || !reflect.DeepEqual(h.P2PWrite, want.Host.P2PWrite) {
		t.Errorf("parsed host differs from the one recorded on the GPU machine:\n%+v\nwant\n%+v", h, want.Host)
	}
	if len(h.GPUs) != 2 || h.GPUs[1].Name != "NVIDIA H200" || h.GPUs[1].ComputeCap != "9.0" || h.GPUs[0].PCIeWidth != 16 || h.GPUs[0].MemoryMiB != 143771 {
		t.Errorf("gpus = %+v", h.GPUs)
	}
	if !h.Topology.FullNVLink() || h.Topology.Links["GPU0"][1] != "NV18" || h.Topology.NUMA["GPU1"] != "0" {
		t.Errorf("topology = %+v", h.Topology)
	}
	f := ids(rep)
	if _, ok := f["topo.full-nvlink"]; !ok {
		t.Errorf("no full-NVLink finding: %+v", rep.Findings)
	}
	if _, ok := f["p2p.blocked"]; ok {
		t.Error("P2P reported blocked on the H200 pair")
	}
	if rep.Verdict != want.Verdict || !strings.HasPrefix(rep.Verdict, "full NVLink, 2 GPUs") {
		t.Errorf("verdict %q, recorded %q", rep.Verdict, want.Verdict)
	}
}

// TestPCIe8 runs doctor over an 8-GPU PCIe host, two sockets, written in
// nvidia-smi's formats: every finding doctor has must show.
func TestPCIe8(t *testing.T) {
	extra := map[string]string{
		"python3 -c":                 "/venv/site-packages/sgl_kernel\n",
		"cuobjdump --list-elf /venv": "ELF file    1: common_ops.1.sm_90a.cubin\nELF file    2: common_ops.2.sm_100a.cubin\nELF file    3: common_ops.3.sm_90a.cubin\n",
	}
	tc := &kernels.Toolchain{
		NVCC:  kernels.Tool{Path: "/usr/local/cuda-12.4/bin/nvcc", Version: "12.4.131"},
		Torch: kernels.Torch{Version: "2.9.1+cu128", CUDA: "12.8"},
	}
	env := []string{"NCCL_P2P_DISABLE=1", "NCCL_PROTO=LL128", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "SGLANG_FORCE_CUSTOM_AR_PCIE=1"}
	fsys := fstest.MapFS{
		"proc/cmdline":              {Data: []byte("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on\n")},
		"sys/kernel/iommu_groups/0": {Mode: os.ModeDir},
		"sys/kernel/iommu_groups/1": {Mode: os.ModeDir},
	}
	sgl := t.TempDir()
	if err := os.WriteFile(filepath.Join(sgl, "common_ops.abi3.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	extra["python3 -c"] = sgl + "\n"
	extra["cuobjdump --list-elf "+sgl] = extra["cuobjdump --list-elf /venv"]
	rep := Inspect(context.Background(), Options{
		Run: recorded(t, "pcie8", extra), Env: env, FS: fsys,
		ServerCmd: "python -m sglang.launch_server --model-path Qwen/Qwen3-32B --speculative-algorithm EAGLE --speculative-draft-model-path AngelSlim/Qwen3-32B_eagle3 --tp-size 16 --disable-custom-all-reduce",
		Probe:     func(context.Context) (*kernels.Toolchain, error) { return tc, nil },
	})
	h := rep.Host
	if len(h.GPUs) != 8 || h.GPUs[0].ComputeCap != "12.0" || h.GPUs[0].Name != "NVIDIA RTX PRO 6000 Blackwell Server Edition" {
		t.Fatalf("gpus = %+v", h.GPUs)
	}
	if h.Topology.FullNVLink() || !h.Topology.PCIeOnly() || len(h.Topology.NUMANodes()) != 2 {
		t.Errorf("topology %+v", h.Topology)
	}
	if c := h.Topology.LinkCounts(); c["SYS"] != 16 || c["PIX"] != 4 || c["NODE"] != 8 {
		t.Errorf("link counts %v", c)
	}
	if got := h.KernelArchs["common_ops.abi3.so"]; !reflect.DeepEqual(got, []string{"90a", "100a"}) {
		t.Errorf("kernel archs %v", got)
	}
	f := ids(rep)
	want := map[string]Severity{
		"gpu.pcie-width":          Warn, // GPU5 at x8
		"gpu.pcie-gen":            Info, // GPU2 idle at gen 1
		"topo.pcie-only":          Warn,
		"topo.numa-split":         Warn,
		"p2p.blocked":             Error, // write CNS across sockets
		"iommu.translate":         Warn,
		"iommu.groups":            Info,
		"toolchain.nvcc":          Error, // 12.4 cannot build sm_120a for these GPUs
		"toolchain.torch":         Info,  // CUDA 12.8 torch with nvcc 12.4: same major
		"sgl-kernel.arch":         Error,
		"env.nccl-p2p-disable":    Error,
		"env.nccl-proto-ll128":    Warn,
		"env.expandable-segments": Warn,
		"server.eagle-vs-eagle3":  Error,
		"server.custom-ar-off":    Warn,
		"server.tp":               Error,
	}
	for id, sev := range want {
		got, ok := f[id]
		if !ok {
			t.Errorf("missing finding %s", id)
			continue
		}
		if got.Severity != sev {
			t.Errorf("%s: severity %s, want %s", id, got.Severity, sev)
		}
		if got.Severity != Info && got.Remedy == "" {
			t.Errorf("%s has no remedy", id)
		}
	}
	if !strings.Contains(f["sgl-kernel.arch"].Title, "no sm_120 code") || !strings.Contains(f["p2p.blocked"].Detail, "GPU0->GPU4: CNS") ||
		!strings.Contains(f["gpu.pcie-width"].Title, "GPU5 runs PCIe x8 of x16") {
		t.Errorf("finding texts: %+v", rep.Findings)
	}
	// P2P write is CNS across the sockets: custom allreduce cannot start,
	// so the verdict says so and prints no custom-allreduce command (with
	// P2P, TestVerdictFollowsModel).
	if rep.Verdict != "PCIe-only, 8 GPUs, NUMA-split across 2 nodes: P2P write is not supported between 32 GPU pairs (GPU0->GPU4: CNS), and SGLang's P2P check disables custom allreduce without it, so every allreduce goes to NCCL; there is nothing for custom allreduce or the pcie series to measure here" {
		t.Errorf("verdict %q", rep.Verdict)
	}
	if strings.Contains(f["topo.pcie-only"].Remedy, "arpatch bench") {
		t.Errorf("topo.pcie-only remedy measures custom allreduce where it cannot start: %q", f["topo.pcie-only"].Remedy)
	}
	// Errors sort first.
	if rep.Findings[0].Severity != Error {
		t.Errorf("first finding %+v", rep.Findings[0])
	}
}

func TestNothingReadable(t *testing.T) {
	rep := Inspect(context.Background(), Options{Run: func(context.Context, string, ...string) (string, error) {
		return "", errors.New("exec: \"nvidia-smi\": executable file not found in $PATH")
	}})
	if rep.Verdict != "no NVIDIA GPU found (nvidia-smi did not answer)" || len(rep.Host.Errors) != 0 || !rep.Host.NoNvidiaSMI {
		t.Errorf("verdict %q errors %v", rep.Verdict, rep.Host.Errors)
	}
	if f := ids(rep); f["driver.missing"].Severity != Error || f["sgl-kernel.missing"].Severity != Info || rep.Findings[0].ID != "driver.missing" {
		t.Errorf("findings %+v", rep.Findings)
	}
}

// A driver that hangs: the first nvidia-smi call times out, no other is
// made, and the finding is an error with the way out.
func TestHungDriver(t *testing.T) {
	var calls []string
	rep := Inspect(context.Background(), Options{Run: func(_ context.Context, name string, args ...string) (string, error) {
		calls = append(calls, name)
		if name == "nvidia-smi" {
			return "", fmt.Errorf("nvidia-smi did not answer in 20s: %w", ErrTimedOut)
		}
		return "", errors.New("not here")
	}})
	smi := 0
	for _, c := range calls {
		if c == "nvidia-smi" {
			smi++
		}
	}
	if smi != 1 {
		t.Errorf("nvidia-smi called %d times after it hung", smi)
	}
	f := ids(rep)["driver.hung"]
	if f.Severity != Error || !strings.Contains(f.Detail, "nvidia-smi --query-gpu: nvidia-smi did not answer in 20s") || !strings.Contains(f.Remedy, "Xid") {
		t.Errorf("finding %+v", f)
	}
	if !strings.HasPrefix(rep.Verdict, "the NVIDIA driver does not answer") {
		t.Errorf("verdict %q", rep.Verdict)
	}
}

func TestExecRunnerTimesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the timeout")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// The caller's deadline comes first here; a deadline is a deadline.
	_, err := ExecRunner(nil)(ctx, "sleep", "5")
	if !errors.Is(err, ErrTimedOut) {
		t.Errorf("err = %v, want ErrTimedOut", err)
	}
}

func TestServerFindingsQuiet(t *testing.T) {
	rep := Inspect(context.Background(), Options{Run: recorded(t, "pcie8", nil), Env: []string{"SGLANG_FORCE_CUSTOM_AR_PCIE=1"},
		ServerCmd: "python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-draft-model-path x/eagle3 --tp-size 8"})
	for _, f := range rep.Findings {
		if strings.HasPrefix(f.ID, "server.") {
			t.Errorf("a correct command line gave %+v", f)
		}
	}
}

func TestParseListELF(t *testing.T) {
	out := "ELF file    1: car_A_120a.1.sm_120a.cubin\n" // as cuobjdump printed it on the GPU machine
	if got := ParseListELF(out); !reflect.DeepEqual(got, []string{"120a"}) {
		t.Errorf("archs %v", got)
	}
	if got := ParseListELF("cuobjdump info    : File 'x.so' does not contain device code"); got != nil {
		t.Errorf("no device code gave %v", got)
	}
}

// TestKernelArchRemedy: the remedy names the arch the table builds for the
// GPUs' compute capability (8.0 has no sm_80a), or says that arpatch
// builds none.
func TestKernelArchRemedy(t *testing.T) {
	for cc, want := range map[string]string{
		"12.0": "arpatch build --arch 120a and install that wheel",
		"8.0":  "arpatch build --arch 80 and install that wheel",
		"6.1":  "arpatch builds for no arch of compute capability 6.1 (it knows 75, 80,",
	} {
		h := &Host{GPUs: []nvsmi.GPU{{ComputeCap: cc}}, SGLKernel: "/site/sgl_kernel", KernelArchs: map[string][]string{"common_ops.abi3.so": {"90a"}}}
		var got *Finding
		for _, f := range findings(h, &Judged{}, nil) {
			if f.ID == "sgl-kernel.arch" {
				got = &f
			}
		}
		if got == nil || !strings.HasPrefix(got.Remedy, want) || got.Title != "installed sgl-kernel has no sm_"+strings.ReplaceAll(cc, ".", "")+" code" {
			t.Errorf("compute capability %s: %+v, want remedy %q", cc, got, want)
		}
	}
}

// TestNVCCFinding: nvcc is judged against the archs of the host's GPUs
// from cudaarch's table (sm_120a by default, with no GPU read): an arch it
// cannot compile is an Error only where such GPUs are.
func TestNVCCFinding(t *testing.T) {
	for _, c := range []struct {
		version, cc string
		sev         Severity
		title       string
	}{
		{"12.4.131", "12.0", Error, "nvcc 12.4.131 cannot compile sm_120a (needs 12.8)"},
		{"12.4.131", "", Info, "nvcc 12.4.131 cannot compile sm_120a (needs 12.8)"},
		{"12.8.93", "12.0", Info, "nvcc 12.8.93 supports sm_120a"},
		{"11.8.89", "9.0", Error, "nvcc 11.8.89 cannot compile sm_90a (needs 12.0)"},
		{"12.4.131", "9.0", Info, "nvcc 12.4.131 supports sm_90a"},
		{"12.4.131", "6.1", Info, "nvcc 12.4.131 cannot compile sm_120a (needs 12.8)"},
	} {
		var gpus []nvsmi.GPU
		if c.cc != "" {
			gpus = []nvsmi.GPU{{ComputeCap: c.cc}, {ComputeCap: c.cc}}
		}
		id, sev, title, detail, remedy := nvccFinding(c.version, "/cuda/bin/nvcc", gpuArchs(gpus))
		if id != "toolchain.nvcc" || sev != c.sev || title != c.title || detail != "/cuda/bin/nvcc" || !strings.Contains(remedy, "needs CUDA") {
			t.Errorf("nvcc %s, GPUs %q: %s %s %q %q %q", c.version, c.cc, id, sev, title, detail, remedy)
		}
	}
	if _, _, _, _, remedy := nvccFinding("13.0", "nvcc", []cudaarch.Arch{"120a", "90a"}); remedy != "sm_120a needs CUDA 12.8+, sm_90a needs CUDA 12.0+, FlashInfer on sm_120 needs 12.9+" {
		t.Errorf("remedy %q", remedy)
	}
}

// FuzzInspect runs the whole of doctor, parse to verdict, on fuzzed
// nvidia-smi outputs (the recorded hosts as seeds, and the repeated GPU
// index that once panicked in nvsmi.(*P2PMatrix).Blocked): it never
// panics, and a parse error is reported, not judged on.
func FuzzInspect(f *testing.F) {
	hosts, _ := filepath.Glob("testdata/*/query-gpu.csv")
	for _, q := range hosts {
		dir := filepath.Dir(q)
		read := func(name string) string { b, _ := os.ReadFile(filepath.Join(dir, name)); return string(b) }
		f.Add(read("query-gpu.csv"), read("topo-m.txt"), read("topo-p2p-r.txt"), read("topo-p2p-w.txt"), "")
		f.Add(read("query-gpu.csv")+"0, NVIDIA H200, 00000000:18:00.0, 9.0, 580.95.05, 5, 5, 16, 16, 143771 MiB\n", read("topo-m.txt"), read("topo-p2p-r.txt"), read("topo-p2p-w.txt"), "0,0,1")
	}
	f.Fuzz(func(t *testing.T, query, topo, p2pr, p2pw, visible string) {
		run := func(ctx context.Context, name string, args ...string) (string, error) {
			switch cmd := name + " " + strings.Join(args, " "); {
			case strings.HasPrefix(cmd, "nvidia-smi --query-gpu"):
				return query, nil
			case cmd == "nvidia-smi topo -m":
				return topo, nil
			case cmd == "nvidia-smi topo -p2p r":
				return p2pr, nil
			case cmd == "nvidia-smi topo -p2p w":
				return p2pw, nil
			}
			return "", errors.New("not recorded")
		}
		rep := Inspect(context.Background(), Options{Run: run, Env: []string{"CUDA_VISIBLE_DEVICES=" + visible}})
		if rep.Verdict == "" {
			t.Fatalf("no verdict: %+v", rep)
		}
	})
}

// A --query-gpu output that repeats a GPU index (which made doctor panic
// and exit 2, the usage code): reported as the error it is, naming the
// line, and the GPUs are not judged.
func TestRepeatedGPUIndex(t *testing.T) {
	b, err := os.ReadFile("testdata/pcie8/query-gpu.csv")
	if err != nil {
		t.Fatal(err)
	}
	dup := string(b) + strings.SplitN(string(b), "\n", 3)[1] + "\n"
	rec := recorded(t, "pcie8", nil)
	run := func(ctx context.Context, name string, args ...string) (string, error) {
		if name == "nvidia-smi" && strings.HasPrefix(args[0], "--query-gpu") {
			return dup, nil
		}
		return rec(ctx, name, args...)
	}
	rep := Inspect(context.Background(), Options{Run: run})
	if len(rep.Host.GPUs) != 0 || !slices.Contains(rep.Host.Errors, "nvidia-smi --query-gpu line 10: GPU index 0 again (line 2 has it): each GPU has one row") {
		t.Errorf("errors %q, GPUs %d, verdict %q", rep.Host.Errors, len(rep.Host.GPUs), rep.Verdict)
	}
}
