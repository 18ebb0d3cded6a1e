package tune

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
)

func TestParseBytesAndAlgorithm(t *testing.T) {
	for raw, want := range map[string]uint64{"0": 0, "65536": 65536, "0040960": 40960, "18446744073709551615": 1<<64 - 1} {
		if got, err := ParseBytes(Env1StageMax, raw); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "-1", "64K", "1e5", " 1", "1 ", "+1", "６", "18446744073709551616"} {
		_, err := ParseBytes(Env1StageMax, raw)
		if err == nil || !strings.Contains(err.Error(), Env1StageMax+"=") {
			t.Errorf("ParseBytes(%q) = %v, want a refusal naming the variable", raw, err)
		}
	}
	def := Defaults()
	cases := []struct {
		t    Thresholds
		ws   int
		n    int
		want string
	}{
		{def, 8, 40960, allreduce.Custom2Stage}, // the verify shape at TP 8: 2-stage by default
		{def, 8, 65536, allreduce.Custom2Stage},
		{def, 8, 65536 + 16, allreduce.NCCL},
		{def, 2, 40960, allreduce.Custom1Stage}, // world size 2: upstream's 1-stage
		{def, 4, 16, allreduce.Custom2Stage},
		{Thresholds{MaxBytes: 1 << 30, OneStageMax: U64(1 << 30)}, 8, 8 << 20, allreduce.Custom1Stage},
		{Thresholds{MaxBytes: 1 << 30, OneStageMax: U64(1 << 30)}, 8, 8<<20 + 16, allreduce.NCCL}, // above max_size
		{Thresholds{MaxBytes: 0, OneStageMax: U64(1 << 20)}, 2, 16, allreduce.NCCL},
		{Thresholds{MaxBytes: 65536, OneStageMax: U64(16384)}, 8, 16384, allreduce.Custom1Stage},
		{Thresholds{MaxBytes: 65536, OneStageMax: U64(16384)}, 8, 16400, allreduce.Custom2Stage},
	}
	for _, c := range cases {
		if got := c.t.Algorithm(c.ws, c.n); got != c.want {
			t.Errorf("%s at world size %d, %d bytes: %s, want %s", c.t, c.ws, c.n, got, c.want)
		}
	}
	th, err := FromEnv(map[string]string{EnvMaxBytes: "0", Env1StageMax: "4096"})
	if err != nil || th.MaxBytes != 0 || *th.OneStageMax != 4096 {
		t.Errorf("FromEnv = %+v, %v", th, err)
	}
	if _, err := FromEnv(map[string]string{EnvMaxBytes: "64K"}); err == nil {
		t.Error("FromEnv took 64K")
	}
	if got := strings.Join(th.Env(), " "); got != "SGLANG_FORCE_CUSTOM_AR_PCIE=1 SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=0 SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=4096" {
		t.Errorf("Env = %s", got)
	}
}

func result(impl, branch string, n int, mode string, us float64) allreduce.Result {
	return allreduce.Result{Impl: impl, Branch: branch, Bytes: n, Mode: mode, OK: true, MedianUS: us}
}

// TestPickRecordedH200 tunes from the world-size-2 sweep recorded on 2x
// H200 (NVLink; harness/allreduce/testdata): in CUDA graphs 1-stage through
// the PCIe branch beat NCCL at every size, so everything up to the largest
// size measured takes 1-stage.
func TestPickRecordedH200(t *testing.T) {
	b, err := os.ReadFile("../allreduce/testdata/h200x2-ws2-report.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep allreduce.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	th, cs, verdict, err := Pick(rep.Run.Results, 2, "graph")
	if err != nil {
		t.Fatal(err)
	}
	if th.MaxBytes != 1<<20 || th.OneStageMax == nil || *th.OneStageMax != 1<<20 {
		t.Errorf("thresholds %s, want 1-stage up to 1M", th)
	}
	if len(cs) != 10 || cs[4].Bytes != 40960 || cs[4].Fastest != allreduce.Custom1Stage || int(cs[4].US[allreduce.NCCL]*10) != 85 || int(cs[4].US[allreduce.Custom1Stage]*10) != 46 {
		t.Errorf("choice at 40K: %+v (of %d)", cs[4], len(cs))
	}
	if !strings.HasPrefix(verdict, "custom allreduce beat NCCL at 10 of 10 sizes at world size 2 (graph mode)") {
		t.Errorf("verdict %q", verdict)
	}
}

func TestPickShapes(t *testing.T) {
	sizes := []int{4096, 40960, 262144, 1 << 20}
	mk := func(nccl, one, two []float64) []allreduce.Result {
		var rs []allreduce.Result
		for i, n := range sizes {
			rs = append(rs, result(allreduce.NCCL, "-", n, "graph", nccl[i]),
				result(allreduce.Custom1Stage, "pcie", n, "graph", one[i]),
				result(allreduce.Custom2Stage, "pcie", n, "graph", two[i]),
				// The NVLink branch and eager mode do not count.
				result(allreduce.Custom1Stage, "nvlink", n, "graph", 0.1),
				result(allreduce.Custom2Stage, "pcie", n, "eager", 0.1))
		}
		return rs
	}
	// 1-stage wins small, 2-stage in the middle, NCCL at 1M.
	th, cs, verdict, err := Pick(mk([]float64{20, 25, 40, 60}, []float64{5, 30, 90, 300}, []float64{8, 10, 30, 80}), 8, "graph")
	if err != nil {
		t.Fatal(err)
	}
	if th.MaxBytes != 262144 || *th.OneStageMax != 4096 {
		t.Errorf("thresholds %s, want 1-stage up to 4K, custom up to 256K", th)
	}
	var chosen []string
	for _, c := range cs {
		chosen = append(chosen, c.Chosen)
	}
	if !reflect.DeepEqual(chosen, []string{"custom-1stage", "custom-2stage", "custom-2stage", "nccl"}) {
		t.Errorf("chosen %v", chosen)
	}
	if !strings.Contains(verdict, "beat NCCL at 3 of 4 sizes") {
		t.Errorf("verdict %q", verdict)
	}

	// Custom never beats NCCL: NCCL at every size, said plainly.
	th, _, verdict, err = Pick(mk([]float64{5, 6, 7, 8}, []float64{9, 9, 9, 9}, []float64{9, 9, 9, 9}), 8, "graph")
	if err != nil || th.MaxBytes != 0 || th.Algorithm(8, 16) != allreduce.NCCL {
		t.Errorf("thresholds %s, %v; want NCCL at every size", th, err)
	}
	if !strings.HasPrefix(verdict, "custom allreduce never beat NCCL at world size 8") {
		t.Errorf("verdict %q", verdict)
	}

	// A wrong 1-stage is never chosen, even where it would be fastest.
	rs := mk([]float64{20, 25, 40, 60}, []float64{1, 1, 1, 1}, []float64{8, 10, 30, 80})
	for i := range rs {
		if rs[i].Impl == allreduce.Custom1Stage && rs[i].Branch == "pcie" {
			rs[i].OK = false
		}
	}
	th, _, _, err = Pick(rs, 8, "graph")
	if err != nil || *th.OneStageMax != 0 || th.MaxBytes != 262144 {
		t.Errorf("with 1-stage WRONG: %s, %v; want 2-stage up to 256K, 1-stage never", th, err)
	}

	// No NCCL timing at a size: refused.
	if _, _, _, err := Pick(rs[1:], 8, "graph"); err == nil || !strings.Contains(err.Error(), "NCCL has no correct timing at 4K") {
		t.Errorf("missing NCCL: %v", err)
	}
}

func TestFileRoundTripAndHostCheck(t *testing.T) {
	here := Host{Name: "gpu-a", GPUModel: "NVIDIA RTX PRO 6000 Blackwell Server Edition", GPUCount: 8, Driver: "580.95.05", NCCL: "2.28.9"}
	f := &File{Host: here, WorldSize: 8, Date: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Mode: "graph",
		Verdict:    "custom allreduce beat NCCL at 3 of 4 sizes",
		Command:    "arpatch tune allreduce --world-size 8 --ext /gpu-a/ext.so --out made-on-gpu-a.env",
		Thresholds: Thresholds{MaxBytes: 262144, OneStageMax: U64(4096)},
		Choices:    []Choice{{Bytes: 40960, US: map[string]float64{"nccl": 25, "custom-1stage": 30, "custom-2stage": 10}, Fastest: "custom-2stage", Chosen: "custom-2stage", Regret: 1}}}
	data := f.Format()
	for _, want := range []string{
		"# arpatch-tune gpus: 8 x NVIDIA RTX PRO 6000 Blackwell Server Edition\n",
		"# size  nccl us  1-stage us  2-stage us  fastest        chosen\n# 40K   25.0     30.0        10.0        custom-2stage  custom-2stage\n",
		"\nSGLANG_FORCE_CUSTOM_AR_PCIE=1\nSGLANG_PCIE_CUSTOM_AR_MAX_BYTES=262144\nSGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=4096\n",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("tune file lacks %q:\n%s", want, data)
		}
	}
	g, err := Parse("t.env", data)
	if err != nil {
		t.Fatal(err)
	}
	g.Choices = f.Choices
	if !reflect.DeepEqual(g, f) {
		t.Errorf("round trip:\n got %+v\nwant %+v", g, f)
	}
	if w, err := g.Check("t.env", here, 8, false); err != nil || len(w) != 0 {
		t.Errorf("same host: %v %v", w, err)
	}
	other := here
	other.Name = "gpu-b"
	_, err = g.Check("t.env", other, 8, false)
	var he *HostError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "tune file t.env was made on gpu-a (8 x NVIDIA RTX PRO 6000 Blackwell Server Edition), this is gpu-b") ||
		!strings.Contains(err.Error(), "tune here with `arpatch tune allreduce --world-size 8 --out t.env`, or pass --force-tune") ||
		strings.Contains(err.Error(), "gpu-a/ext.so") || strings.Contains(err.Error(), "made-on-gpu-a.env") {
		t.Errorf("other host: the remedy must tune here, writing t.env, not replay gpu-a's command: %v", err)
	}
	if got, want := RetuneCommand("my tune.env", 4, "--src", "sglang"), "arpatch tune allreduce --world-size 4 --src sglang --out 'my tune.env'"; got != want {
		t.Errorf("RetuneCommand = %s, want %s", got, want)
	}
	fewer := here
	fewer.GPUCount = 4
	if _, err := g.Check("t.env", fewer, 8, false); !errors.As(err, &he) || !reflect.DeepEqual(he.Differs, []string{"GPUs"}) {
		t.Errorf("other GPU count: %v", err)
	}
	w, err := g.Check("t.env", other, 8, true)
	if err != nil || len(w) != 1 || !strings.HasPrefix(w[0], "--force-tune: ") {
		t.Errorf("forced: %v %v", w, err)
	}
	newer := here
	newer.Driver, newer.NCCL = "590.10", "2.29.1"
	w, err = g.Check("t.env", newer, 4, false)
	if err != nil || len(w) != 3 || !strings.Contains(w[0], "driver 580.95.05, this host has 590.10") || !strings.Contains(w[2], "world size 8, this run uses 4") {
		t.Errorf("changed driver/NCCL/world size: %q %v", w, err)
	}

	for _, bad := range []struct{ text, want string }{
		{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=1\n", "not an arpatch tune file"},
		{strings.Replace(string(data), "MAX_BYTES=262144", "MAX_BYTES=256K", 1), `SGLANG_PCIE_CUSTOM_AR_MAX_BYTES="256K": expected a whole number`},
		{string(data) + "NCCL_PROTO=LL\n", "t.env:19: NCCL_PROTO is not a variable a tune file sets"},
		{string(data) + "junk\n", `t.env:19: "junk" is neither a comment nor KEY=VALUE`},
		// Lines a shell reads otherwise (issue 26): each refused by line.
		{string(data) + "\v#; touch X\n", `t.env:19: byte 1 is the control character '\v', which a shell reads as part of a word: a shell, systemd and docker would not all read the line as arpatch does; write the file again with ` + "`arpatch tune allreduce --out t.env`"},
		{string(data) + "\u00a0#; touch X\n", "t.env:19: the line starts with U+00A0"},
		{strings.Replace(string(data), "MAX_BYTES=262144", "MAX_BYTES=262144$(touch X)", 1), `t.env:17: SGLANG_PCIE_CUSTOM_AR_MAX_BYTES: the value "262144$(touch X)" holds '$'`},
		{strings.Replace(string(data), "MAX_BYTES=262144", "MAX_BYTES='262144'", 1), `holds '\''`},
		{"\ufeff" + string(data), "t.env:1: the file starts with a byte-order mark"},
		{strings.Replace(string(data), "# arpatch-tune host: gpu-a\n", "# arpatch-tune host: gpu-a \\\nSGLANG_PCIE_CUSTOM_AR_MAX_BYTES=1\n", 1), "t.env:4: the comment ends in '\\'"},
		{strings.Replace(string(data), "SGLANG_FORCE_CUSTOM_AR_PCIE=1", "SGLANG_FORCE_CUSTOM_AR_PCIE=0", 1), "t.env:16: SGLANG_FORCE_CUSTOM_AR_PCIE=\"0\", want 1"},
		// Tampered or truncated files (F9, F10): each refused, naming the line.
		{strings.Replace(string(data), "world_size: 8", "world_size: 3", 1), "t.env:8: world_size 3: custom allreduce supports world sizes 2, 4, 6 and 8, so no tune measured it"},
		{string(data) + "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=8388608\n", "t.env:19: SGLANG_PCIE_CUSTOM_AR_MAX_BYTES is set twice (lines 17 and 19"},
		{strings.Replace(string(data), "# arpatch-tune host: gpu-a\n", "# arpatch-tune host: gpu-a\n# arpatch-tune host: gpu-b\n", 1), "t.env:5: the host record is given twice (lines 4 and 5)"},
		{strings.ReplaceAll(string(data), "\n", "\r\n"), "t.env:1: the line ends in CRLF (\\r\\n): `set -a; . ./t.env; set +a` would pass"},
		{strings.Replace(string(data), "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=4096\n", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=4096\r\n", 1), "t.env:18: the line ends in CRLF"},
		{strings.Split(string(data), "SGLANG_FORCE_CUSTOM_AR_PCIE=1")[0], "t.env: no SGLANG_FORCE_CUSTOM_AR_PCIE line (want SGLANG_FORCE_CUSTOM_AR_PCIE=1"},
		{strings.Split(string(data), "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=")[0], "t.env: no SGLANG_PCIE_CUSTOM_AR_MAX_BYTES line; write the file again with `arpatch tune allreduce --out t.env`"},
		{strings.Replace(string(data), "# arpatch-tune host: gpu-a\n", "", 1), "the host, gpus, world_size or date record is missing"},
	} {
		if _, err := Parse("t.env", []byte(bad.text)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q...) = %v, want %q", bad.text[:20], err, bad.want)
		}
	}
	if got := Dispatch(Thresholds{MaxBytes: 65536, OneStageMax: U64(4096)}, 8, []int{1 << 20, 4096, 40960}); !reflect.DeepEqual(got, []string{"4K custom-1stage", "40K custom-2stage", "1M nccl"}) {
		t.Errorf("Dispatch = %v", got)
	}
}

// TestFormatHostileRecords: a record value that holds a newline or another
// control character (a GPU name, a path in the command) stays on its
// comment line, quoted: the file parses, and a real sh loads exactly the
// three thresholds from it, running nothing.
func TestFormatHostileRecords(t *testing.T) {
	f := &File{Host: Host{Name: "gpu-a\ntouch HOST", GPUModel: "H200\v;touch MODEL", GPUCount: 8}, WorldSize: 8,
		Date: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Mode: "graph", Verdict: "ends in \\",
		Command:    RetuneCommand("a\n$(touch CMD).env", 8),
		Thresholds: Thresholds{MaxBytes: 262144, OneStageMax: U64(4096)}}
	data := f.Format()
	g, err := Parse("t.env", data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	g.Choices = f.Choices
	if !reflect.DeepEqual(g, f) || !strings.Contains(string(data), "\n# arpatch-tune command: \"arpatch tune allreduce --world-size 8 --out 'a\\n$(touch CMD).env'\"\n") {
		t.Errorf("records not quoted on their lines: host %q\n%s", g.Host.Name, data)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.env"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sh, "-c", "env -i sh -c 'set -a; . ./t.env; set +a; env' 2>&1")
	cmd.Dir = dir
	out, err := cmd.Output()
	var vars []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, _, _ := strings.Cut(l, "="); k != "PWD" && k != "OLDPWD" && k != "SHLVL" && k != "_" {
			vars = append(vars, l)
		}
	}
	ents, _ := os.ReadDir(dir)
	want := f.Thresholds.Env()
	slices.Sort(vars)
	slices.Sort(want)
	if err != nil || !reflect.DeepEqual(vars, want) || len(ents) != 1 {
		t.Errorf("sh loads %v (%v, %d files in its directory), want exactly %v", vars, err, len(ents), want)
	}
}
