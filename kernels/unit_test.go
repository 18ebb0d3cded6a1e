package kernels

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/shellq"
)

func TestParseNVCCVersion(t *testing.T) {
	for file, want := range map[string]string{"nvcc-13.0.txt": "13.0.88", "nvcc-12.4.txt": "12.4.131"} {
		b, err := os.ReadFile("testdata/recorded/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if got := ParseNVCCVersion(string(b)); got != want {
			t.Errorf("%s: %q, want %q", file, got, want)
		}
	}
	if got := ParseNVCCVersion("bash: nvcc: command not found"); got != "" {
		t.Errorf("garbage gave %q", got)
	}
	for in, want := range map[string]string{
		"cmake version 4.4.3\n\nCMake suite":    "4.4.3",
		"uv 0.11.15 (x86_64-unknown-linux-gnu)": "0.11.15",
		"1.13.2.git.kitware.jobserver-pipe-1":   "1.13.2",
		"c++ (GCC) 13.3.0":                      "13.3.0",
	} {
		if got := ParseVersion(versionField(in)).String(); got != want {
			t.Errorf("version of %q = %q, want %q", in, got, want)
		}
	}
	if v := ParseVersion("2.11.0+cu130"); v.String() != "2.11.0" || v.Major() != 2 {
		t.Errorf("torch version %v", v)
	}
}

func TestParseNinjaSteps(t *testing.T) {
	b, err := os.ReadFile("testdata/recorded/ninja-build.txt")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(string(b), "\n") {
		if n, m, d, ok := ParseNinjaStep(l); ok {
			got = append(got, strings.Join([]string{itoa(n), itoa(m), d}, "|"))
		}
	}
	want := []string{
		"1|412|Building CXX object CMakeFiles/common_ops.dir/csrc/common_extension.cc.o",
		"2|412|Building CUDA object CMakeFiles/common_ops.dir/csrc/allreduce/custom_all_reduce.cu.o",
		"17|412|Building CUDA object CMakeFiles/common_ops.dir/csrc/gemm/fp8_gemm_kernel.cu.o",
		"412|412|Linking CXX shared module common_ops.abi3.so",
		"1|3|Install the project...",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps:\n%q\nwant\n%q", got, want)
	}
	if _, _, _, ok := ParseNinjaStep("[5/3] impossible"); ok {
		t.Error("accepted n > m")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestFilterGencode(t *testing.T) {
	args := []string{"nvcc", "-O3", "-gencode=arch=compute_90,code=sm_90", "-gencode", "arch=compute_120a,code=sm_120a",
		"--generate-code=arch=compute_100a,code=[sm_100a,compute_100a]", "-c", "x.cu"}
	out, dropped := FilterGencode(args, []cudaarch.Arch{"120a"})
	if want := []string{"nvcc", "-O3", "-gencode", "arch=compute_120a,code=sm_120a", "-c", "x.cu"}; !reflect.DeepEqual(out, want) {
		t.Errorf("out = %q, want %q", out, want)
	}
	if !reflect.DeepEqual(dropped, []string{"90", "100a"}) {
		t.Errorf("dropped = %v", dropped)
	}
	// A translation unit built only for another arch is left alone.
	fa3 := []string{"nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-c", "fa3.cu"}
	if out, dropped := FilterGencode(fa3, []cudaarch.Arch{"120a"}); !reflect.DeepEqual(out, fa3) || dropped != nil {
		t.Errorf("sm_90a-only TU changed: %q %v", out, dropped)
	}
	if got := UpstreamArchs(fixtureCMake); !reflect.DeepEqual(got, []cudaarch.Arch{"90", "80", "100a", "120a", "90a"}) {
		t.Errorf("UpstreamArchs = %v", got)
	}
}

// TestKeySensitivity changes each input alone and checks that the key
// changes; a key that forgets an input serves a wrong build.
func TestKeySensitivity(t *testing.T) {
	base := Inputs{
		Schema: KeySchema, Kind: "wheel", Commit: strings.Repeat("a", 40), Series: "pcie-2026-04", Project: "sgl-kernel",
		Patches: []PatchInput{{"0001-x.patch", strings.Repeat("1", 64)}, {"0002-y.patch", strings.Repeat("2", 64)}},
		Archs:   []string{"120a"}, Builder: "uv", Deps: []DepInput{{Name: "repo-cutlass", Tag: "v1"}},
		BuildEnv:  map[string]string{"CMAKE_ARGS": "-DENABLE_CCACHE=OFF"},
		Toolchain: ToolVersions{NVCC: "13.0.88", Python: "3.12.3", Torch: "2.11.0+cu130", TorchCUDA: "13.0", CXX11ABI: true, CMake: "4.4.3", Ninja: "1.13.2", Builder: "uv 0.11.15", HostCXX: "gcc 13.3.0"},
		Repro:     &Repro{Scheme: ReproScheme, SourceDateEpoch: 1775217600, TZ: "UTC", Locale: "C", BuildRoot: DefaultBuildRoot},
	}
	k0 := base.Key()
	muts := map[string]func(*Inputs){
		"commit": func(in *Inputs) { in.Commit = strings.Repeat("b", 40) },
		"series": func(in *Inputs) { in.Series = "pcie-2026-07" },
		// The same commit, series and patches with the sgl-kernel project
		// elsewhere (upstream moved it on 2026-07-29) is another build.
		"project": func(in *Inputs) { in.Project = "python/sglang/kernels/aot" },
		"patch hash": func(in *Inputs) {
			in.Patches = []PatchInput{{"0001-x.patch", strings.Repeat("3", 64)}, base.Patches[1]}
		},
		"patch dropped": func(in *Inputs) { in.Patches = base.Patches[:1] },
		"archs":         func(in *Inputs) { in.Archs = []string{"120a", "90a"} },
		"builder":       func(in *Inputs) { in.Builder = "pip" },
		"offline":       func(in *Inputs) { in.Offline = true },
		"dep tag":       func(in *Inputs) { in.Deps = []DepInput{{Name: "repo-cutlass", Tag: "v2"}} },
		"dep commit":    func(in *Inputs) { in.Deps = []DepInput{{Name: "repo-cutlass", Tag: "v1", Commit: "c"}} },
		"dep url": func(in *Inputs) {
			in.Deps = []DepInput{{Name: "repo-cutlass", Tag: "v1", Repo: "https://x/archive/v1.tar.gz"}}
		},
		"dep url hash": func(in *Inputs) { in.Deps = []DepInput{{Name: "repo-cutlass", Tag: "v1", URLHash: "SHA256=ab"}} },
		"build env": func(in *Inputs) {
			in.BuildEnv = map[string]string{"CMAKE_ARGS": "-DENABLE_CCACHE=OFF", "CXX": "clang++"}
		},
		"nvcc":         func(in *Inputs) { in.Toolchain.NVCC = "13.0.89" },
		"python":       func(in *Inputs) { in.Toolchain.Python = "3.12.4" },
		"torch":        func(in *Inputs) { in.Toolchain.Torch = "2.11.1+cu130" },
		"torch cuda":   func(in *Inputs) { in.Toolchain.TorchCUDA = "13.1" },
		"abi":          func(in *Inputs) { in.Toolchain.CXX11ABI = false },
		"cmake":        func(in *Inputs) { in.Toolchain.CMake = "4.4.4" },
		"ninja":        func(in *Inputs) { in.Toolchain.Ninja = "1.13.3" },
		"builder ver":  func(in *Inputs) { in.Toolchain.Builder = "uv 0.11.16" },
		"host cxx":     func(in *Inputs) { in.Toolchain.HostCXX = "gcc 14.1.0" },
		"kind":         func(in *Inputs) { in.Kind = "allreduce-ext" },
		"extra":        func(in *Inputs) { in.Extra = map[string]string{"binding.cpp_sha256": "x"} },
		"repro epoch":  func(in *Inputs) { r := *base.Repro; r.SourceDateEpoch++; in.Repro = &r },
		"repro tz":     func(in *Inputs) { r := *base.Repro; r.TZ = "Europe/Paris"; in.Repro = &r },
		"repro locale": func(in *Inputs) { r := *base.Repro; r.Locale = "en_US.UTF-8"; in.Repro = &r },
		"repro root":   func(in *Inputs) { r := *base.Repro; r.BuildRoot = "/var/tmp/arpatch"; in.Repro = &r },
		"repro scheme": func(in *Inputs) { r := *base.Repro; r.Scheme++; in.Repro = &r },
		"repro unset":  func(in *Inputs) { in.Repro = nil },
	}
	for name, mut := range muts {
		in := base
		in.Patches = append([]PatchInput(nil), base.Patches...)
		mut(&in)
		if in.Key() == k0 {
			t.Errorf("changing %s did not change the key", name)
		}
	}
	// Order of archs and deps does not matter; they are sets.
	in := base
	in.Archs = []string{"90a", "120a"}
	in2 := base
	in2.Archs = []string{"120a", "90a"}
	if in.Key() != in2.Key() {
		t.Error("arch order changed the key")
	}
	if base.Key() != k0 {
		t.Error("the key is not stable")
	}
}

func TestPlanKeyIgnoresParallelism(t *testing.T) {
	e := newEnv(t)
	o := e.opts()
	a := mustPlan(t, o)
	o.Jobs = 1
	b := mustPlan(t, o)
	if a.Key != b.Key || a.Env["MAX_JOBS"] == b.Env["MAX_JOBS"] {
		t.Errorf("jobs changed the key (%s vs %s) or not the env", a.Key[:8], b.Key[:8])
	}
	c := mustPlan(t, e.with("CXX=clang++").opts())
	if c.Key == a.Key || c.Inputs.BuildEnv["CXX"] != "clang++" {
		t.Error("a CXX from the environment did not reach the key")
	}
	for _, kv := range []string{"LDFLAGS=-Wl,-O1", "CUDAFLAGS=-lineinfo", "CMAKE_BUILD_TYPE=Debug", "SKBUILD_CMAKE_BUILD_TYPE=Debug", "CUDACXX=/opt/cuda-13.1/bin/nvcc"} {
		k, v, _ := strings.Cut(kv, "=")
		if p := mustPlan(t, e.with(kv).opts()); p.Key == a.Key || p.Inputs.BuildEnv[k] != v {
			t.Errorf("%s did not reach the key", k)
		}
	}
	if p := mustPlan(t, e.with("TERM=dumb", "SKBUILD_X=").opts()); p.Key != a.Key {
		t.Error("a variable that cannot change the output changed the key")
	}
	d := mustPlan(t, e.opts("120a", "90a"))
	if d.Key == a.Key || d.Env[GencodeEnv] != "120a,90a" {
		t.Errorf("archs: key same or env %q", d.Env[GencodeEnv])
	}
}

func TestCacheLockAndStaleBuilds(t *testing.T) {
	c := Cache{Dir: t.TempDir()}
	key := strings.Repeat("ab", 32)
	tmp, release, err := c.Begin(key)
	if err != nil {
		t.Fatal(err)
	}
	// A second build of the same key while the first runs: refused, with
	// the lock and this process's pid.
	if _, _, err := c.Begin(key); err == nil || !strings.Contains(err.Error(), "another build of the same inputs is running") || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Begin: %v", err)
	}
	// GC leaves a live build's temp dir alone.
	if removed, _ := c.GC(10); len(removed) != 0 {
		t.Errorf("GC removed %v during a live build", removed)
	}
	release()

	// A build that died: its lock names a pid that is gone, its temp dir
	// is left. GC removes the temp dir; Begin takes the lock over and
	// clears the leftovers.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip("no `true` to get a dead pid from")
	}
	pid := []byte(strconv.Itoa(dead.Process.Pid) + "\n")
	if err := os.WriteFile(filepath.Join(c.Dir, "."+key+".lock"), pid, 0o644); err != nil {
		t.Fatal(err)
	}
	if removed, _ := c.GC(10); len(removed) != 1 || removed[0] != tmp {
		t.Errorf("GC after a dead build removed %v, want [%s]", removed, tmp)
	}
	leftover := filepath.Join(c.Dir, ".tmp-"+key[:16]+"-dead")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	// Its compilers outlived it (arpatch got SIGKILL): refused until they
	// are stopped, and the temp dir they write to is kept.
	octx, stop := context.WithCancel(context.Background())
	orphan := procgroup.Command(octx, 0, "sleep", "30")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(leftover, PGIDFile), []byte(strconv.Itoa(orphan.PGID())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Begin(key); err == nil || !strings.Contains(err.Error(), "left its processes running (process group "+strconv.Itoa(orphan.PGID())) {
		t.Errorf("Begin with a live orphan group: %v", err)
	}
	if _, err := os.Stat(leftover); err != nil {
		t.Errorf("the orphans' temp dir was removed: %v", err)
	}
	stop()
	_ = orphan.Wait() // context.Canceled, as asked
	tmp2, release2, err := c.Begin(key)
	if err != nil {
		t.Fatalf("Begin over a dead build's lock: %v", err)
	}
	defer release2()
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the dead build's temp dir is still there: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(c.Dir, "."+key+".lock")); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) || tmp2 == "" {
		t.Errorf("lock after takeover holds %q", b)
	}
}

func TestArchsUpstreamHasAndQuoting(t *testing.T) {
	up := []cudaarch.Arch{"90", "100a", "120a", "90a"}
	if err := CheckUpstreamArchs([]cudaarch.Arch{"120a", "90a"}, up); err != nil {
		t.Error(err)
	}
	err := CheckUpstreamArchs([]cudaarch.Arch{"100"}, up)
	if err == nil || !strings.Contains(err.Error(), "--arch 100: upstream's CMake files do not compile sm_100 (did you mean 100a?)") {
		t.Errorf("err = %v", err)
	}
	for in, want := range map[string]string{
		"-DX=/plain/path":            "-DX=/plain/path",
		"-DX=/tmp/my bin/arpatch;gf": "'-DX=/tmp/my bin/arpatch;gf'",
		"-DX=/it's":                  `'-DX=/it'"'"'s'`,
	} {
		if got := cmakeArg(in); got != want {
			t.Errorf("cmakeArg(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCMakeArgIsShlexs: Python's shlex.split, as scikit-build-core reads
// CMAKE_ARGS, reads each cmakeArg word back as itself, where it misreads
// shellq.Quote's word for one with a single quote and a dollar (why
// cmakeArg is its own quoting).
func TestCMakeArgIsShlexs(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to run shlex")
	}
	words := []string{"-DX=/plain/path", "-DX=/tmp/my bin/arpatch;gf", "-DX=/it's", "-DX=a b'c$d", `-DX=a\b`, "-DX=`q`\"x\"", "-DX=line\nnext\rcr"}
	split := func(line string) []string {
		out, err := exec.Command(py, "-c", "import json, shlex, sys; print(json.dumps(shlex.split(sys.argv[1])))", line).Output()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = cmakeArg(w)
	}
	if got := split(strings.Join(q, " ")); !slices.Equal(got, words) {
		t.Errorf("shlex.split of cmakeArg's words = %q, want %q", got, words)
	}
	if got := split(shellq.Quote("-DX=a b'c$d")); slices.Equal(got, []string{"-DX=a b'c$d"}) {
		t.Errorf("shlex reads shellq.Quote's word back (%q): cmakeArg could be shellq.Quote", got)
	}
}

// TestPythonFlagInRemedies: a toolchain probed for --python-b names
// --python-b in Validate's torch remedy and in Probe's refusals, not
// --python.
func TestPythonFlagInRemedies(t *testing.T) {
	tc := &Toolchain{flag: "--python-b", Python: Tool{Path: "/venv-b/bin/python"}, Torch: Torch{Error: "ModuleNotFoundError: No module named 'torch'"},
		NVCC: Tool{Path: "/cuda/bin/nvcc", Version: "13.0.88"}}
	err := tc.Validate(Needs{Torch: true})
	if want := "/venv-b/bin/python cannot import torch (ModuleNotFoundError: No module named 'torch'); pass --python-b with the interpreter of your serving environment"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Validate = %v, want it to hold %q", err, want)
	}
	tc.flag = ""
	if err := tc.Validate(Needs{Torch: true}); err == nil || !strings.Contains(err.Error(), "; pass --python with") {
		t.Errorf("Validate without a flag = %v, want --python", err)
	}
	_, err = Probe(context.Background(), ProbeOptions{Python: "no-such-python-arpatch", Flag: "--python-a", Env: []string{"PATH=" + t.TempDir()}})
	if want := `python interpreter "no-such-python-arpatch" not found on PATH; pass --python-a with the interpreter of your serving environment`; err == nil || err.Error() != want {
		t.Errorf("Probe = %v, want %q", err, want)
	}
}

// TestNoNVCCNamesAToolkitFound: without nvcc on PATH or in $CUDA_HOME,
// Probe finds the toolkits installed in the usual places and the refusal
// names the export that uses one; following it as printed (CUDA_HOME set
// to the quoted directory) finds nvcc. With none installed the refusal
// says which CUDA to install for the archs asked (the newest minimum).
func TestNoNVCCNamesAToolkitFound(t *testing.T) {
	root := t.TempDir()
	fake, err := filepath.Abs("testdata/fakebin")
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, "usr local", "cuda-13.0")
	if err := os.MkdirAll(filepath.Join(home, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(fake, "nvcc"), filepath.Join(home, "bin", "nvcc")); err != nil {
		t.Fatal(err)
	}
	// A directory of the glob's shape without an executable nvcc is no toolkit.
	if err := os.MkdirAll(filepath.Join(root, "usr local", "cuda-12.4", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	saved := toolkitGlobs
	toolkitGlobs = []string{filepath.Join(root, "usr local", "cuda*", "bin", "nvcc")}
	t.Cleanup(func() { toolkitGlobs = saved })

	noNVCC := t.TempDir() // the fake python, no nvcc
	if err := os.Symlink(filepath.Join(fake, "python3"), filepath.Join(noNVCC, "python3")); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + noNVCC}
	tc, err := Probe(context.Background(), ProbeOptions{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	err = tc.Validate(Needs{Archs: []cudaarch.Arch{"90a", "120a"}})
	remedy := "export CUDA_HOME=" + shellq.Quote(home)
	if want := "nvcc not found (looked in $CUDA_HOME/bin and PATH); found a CUDA toolkit at " + home + ": `" + remedy + "`"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate = %v, want it to hold %q", err, want)
	}
	out, err := exec.Command("sh", "-c", remedy+` && printf %s "$CUDA_HOME"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	tc, err = Probe(context.Background(), ProbeOptions{Env: append(env, "CUDA_HOME="+string(out))})
	if err != nil || tc.NVCC.Version != "13.0.88" || tc.NVCC.Path != filepath.Join(home, "bin", "nvcc") {
		t.Errorf("after the remedy: nvcc %+v, %v; want %s/bin/nvcc, 13.0.88", tc.NVCC, err, home)
	}

	toolkitGlobs = []string{filepath.Join(root, "none", "bin", "nvcc")}
	tc, err = Probe(context.Background(), ProbeOptions{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	err = tc.Validate(Needs{Archs: []cudaarch.Arch{"90a", "120a", "100a"}})
	if want := "nvcc not found (looked in $CUDA_HOME/bin and PATH); install the CUDA toolkit 12.8 or newer (for sm_120a), then set CUDA_HOME to its directory (the one holding bin/nvcc)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Validate = %v, want it to hold %q", err, want)
	}
}
