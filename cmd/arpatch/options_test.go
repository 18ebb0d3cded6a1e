package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/recipes"
)

// fakeHome sets HOME to a new directory holding paths (a directory when
// the path ends in "/", else an empty file), which the path flags'
// existence checks find, and returns it.
func fakeHome(t *testing.T, paths ...string) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, p := range paths {
		full := filepath.Join(home, p)
		err := os.MkdirAll(filepath.Dir(full), 0o755)
		if err == nil && strings.HasSuffix(p, "/") {
			err = os.MkdirAll(full, 0o755)
		} else if err == nil {
			err = os.WriteFile(full, nil, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// The options functions' table tests: a command line, parsed by urfave/cli
// through the adapter, turned into the command's options; and the
// command lines each refuses, with the exit code and what the message
// names (the flag, the remedy).

func TestApplyOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	o, err := cmdOptsOf(t, newCmdApply, "arpatch apply")
	if err != nil {
		t.Fatal(err)
	}
	a := o.Apply
	if a.Recipe.Name != "pcie" || a.Src != "sglang" || a.Repo != "" || a.Commit != "" || a.Series != "" || a.DryRun || a.Catalog == nil || len(a.Catalog.Series) == 0 || o.Tune != (tuneFlags{}) {
		t.Errorf("defaults: %+v %+v", a, o.Tune)
	}
	o, err = cmdOptsOf(t, newCmdApply, "arpatch apply --recipe baseline --src ~/s --repo ~/m.git --commit c0ffee --series pcie-2026-07 --dry-run --tune ~/t.env --force-tune")
	if err != nil {
		t.Fatal(err)
	}
	a = o.Apply
	if a.Recipe.Name != "baseline" || a.Src != "/home/u/s" || a.Repo != "/home/u/m.git" || a.Commit != "c0ffee" || a.Series != "pcie-2026-07" || !a.DryRun ||
		o.Tune != (tuneFlags{Tune: "/home/u/t.env", ForceTune: true}) {
		t.Errorf("flags: %+v %+v", a, o.Tune)
	}
	cmdRefuses(t, newCmdApply, []refusal{
		{"arpatch apply --recipe pcie --recipe-file x.toml", exitUsage, []string{"--recipe and --recipe-file are exclusive", "pass one"}},
		{"arpatch apply --recipe nosuch", exitUsage, []string{`--recipe: no recipe named "nosuch"`, "known recipes: baseline, pcie", "--recipe-file PATH"}},
		{"arpatch apply --recipe-file nosuch.toml", exitUsage, []string{"--recipe-file", "nosuch.toml"}},
		{"arpatch apply --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch apply --series ''", exitUsage, []string{"--series was given an empty value"}},
		{"arpatch apply stray", exitUsage, []string{`apply takes no arguments, got ["stray"]`}},
		{"arpatch apply --dry-run=maybe", exitUsage, []string{"-dry-run"}},
	})
}

func TestRevertOpts(t *testing.T) {
	home := fakeHome(t, "s/", "d/", "x.so")
	for _, c := range []struct {
		argv               string
		src                string
		force, dryRun, own bool
	}{
		{"arpatch revert", "sglang", false, false, false},
		{"arpatch revert --src ~/s --force --dry-run", home + "/s", true, true, false},
		{"arpatch revert --patches-dir ../../patches/sglang", "sglang", false, false, true},
	} {
		o, err := cmdOptsOf(t, newCmdRevert, c.argv)
		if err != nil {
			t.Errorf("%s: %v", c.argv, err)
			continue
		}
		if o.Src != c.src || o.Force != c.force || o.DryRun != c.dryRun || o.Catalog == nil || (o.Catalog.Dir == "../../patches/sglang") != c.own {
			t.Errorf("%s: %+v (catalog dir %q)", c.argv, o, o.Catalog.Dir)
		}
	}
	cmdRefuses(t, newCmdRevert, []refusal{
		{"arpatch revert --src /nonexistent", exitFailure, []string{"--src /nonexistent: no checkout there: `arpatch apply --src /nonexistent` clones SGLang there at the recipe's commit and applies its series (add --repo with a local mirror), or point --src at your SGLang checkout"}},
		{"arpatch revert --src ~/x.so", exitUsage, []string{"--src " + home + "/x.so: is a file; name a directory"}},
		{"arpatch revert --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch revert sglang", exitUsage, []string{"revert takes no arguments"}},
		{"arpatch revert --src ''", exitUsage, []string{"--src was given an empty value"}},
	})
}

func TestStatusOpts(t *testing.T) {
	home := fakeHome(t, "s/", "d/", "x.so")
	o, err := cmdOptsOf(t, newCmdStatus, "arpatch status")
	if err != nil || o.Src != "sglang" || o.JSON || o.Catalog == nil {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	o, err = cmdOptsOf(t, newCmdStatus, "arpatch status --json --src ~/s")
	if err != nil || o.Src != home+"/s" || !o.JSON {
		t.Errorf("flags: %+v, %v", o, err)
	}
	cmdRefuses(t, newCmdStatus, []refusal{
		{"arpatch status --src /nonexistent", exitFailure, []string{"--src /nonexistent: no checkout there: `arpatch apply --src /nonexistent` clones SGLang there at the recipe's commit and applies its series (add --repo with a local mirror), or point --src at your SGLang checkout"}},
		{"arpatch status --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch status --json=yes", exitUsage, []string{"-json"}},
		{"arpatch status sglang", exitUsage, []string{"status takes no arguments"}},
	})
}

func TestPatchesOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	cat, err := cmdOptsOf(t, newCmdPatchesList, "arpatch patches list")
	if err != nil || len(cat.Series) == 0 || cat.Dir != "" {
		t.Errorf("list: %v, dir %q", err, cat.Dir)
	}
	o, err := cmdOptsOf(t, newCmdPatchesCheck, "arpatch patches check --repo ~/m.git --commit main --commit v1 --series pcie-2026-07 --strict --json")
	if err != nil {
		t.Fatal(err)
	}
	if o.Repo != "/home/u/m.git" || o.RepoArg != "~/m.git" || !reflect.DeepEqual(o.Commits, []string{"main", "v1"}) || !reflect.DeepEqual(o.Series, []string{"pcie-2026-07"}) || !o.Strict || !o.JSON {
		t.Errorf("check: %+v", o)
	}
	// Flags after the arguments move in front of them.
	dirs, err := cmdOptsOf(t, newCmdPatchesSeal, "arpatch patches seal a b")
	if err != nil || !reflect.DeepEqual(dirs, []string{"a", "b"}) {
		t.Errorf("seal: %q, %v", dirs, err)
	}
	cmdRefuses(t, newCmdPatchesList, []refusal{
		{"arpatch patches list --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch patches list x", exitUsage, []string{"list takes no arguments"}},
	})
	cmdRefuses(t, newCmdPatchesCheck, []refusal{
		{"arpatch patches check --commit main", exitUsage, []string{"--repo is required"}},
		{"arpatch patches check --repo m", exitUsage, []string{"--commit is required"}},
		{"arpatch patches check --repo m --commit main --series nosuch", exitUsage, []string{"--series", "nosuch"}},
		{"arpatch patches check --repo m --commit main --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch patches check --repo m --commit main x", exitUsage, []string{"check takes no arguments"}},
	})
	cmdRefuses(t, newCmdPatchesSeal, []refusal{
		{"arpatch patches seal", exitUsage, []string{"seal needs at least one series directory", "patches/sglang/pcie-2026-04"}},
		{"arpatch patches seal dir --dry-run", exitUsage, []string{"unknown flag --dry-run"}},
		{"arpatch patches seal -- -x", exitUsage, []string{`seal takes directories only, got "-x" (seal has no flags)`}},
	})
}

func TestPortOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	o, err := cmdOptsOf(t, newCmdPort, "arpatch patches port --series pcie-2026-07 --to main")
	if err != nil {
		t.Fatal(err)
	}
	if o.Series.Name != "pcie-2026-07" || o.To != "main" || o.From != "" || o.Repo != "sglang" || o.RepoArg != "sglang" || len(o.Moves) != 0 || o.Out != "" || o.JSON != "" || o.Seal {
		t.Errorf("defaults: %+v", o)
	}
	o, err = cmdOptsOf(t, newCmdPort, "arpatch patches port --series pcie-2026-07 --to v2 --from v1 --repo ~/m.git --out ~/next --json ~/p.json --seal --move a/x.cuh=b/x.cuh --move c=d")
	if err != nil {
		t.Fatal(err)
	}
	if o.To != "v2" || o.From != "v1" || o.Repo != "/home/u/m.git" || o.RepoArg != "~/m.git" || o.Out != "/home/u/next" || o.JSON != "/home/u/p.json" || !o.Seal ||
		!reflect.DeepEqual(o.Moves, map[string]string{"a/x.cuh": "b/x.cuh", "c": "d"}) {
		t.Errorf("flags: %+v", o)
	}
	cmdRefuses(t, newCmdPort, []refusal{
		{"arpatch patches port --to main", exitUsage, []string{"--series is required"}},
		{"arpatch patches port --series pcie-2026-07", exitUsage, []string{"--to is required"}},
		{"arpatch patches port --series nosuch --to main", exitUsage, []string{"--series", "nosuch"}},
		{"arpatch patches port --series pcie-2026-07 --to main --move a.cuh", exitUsage, []string{`--move "a.cuh": want OLD=NEW`, "e.g. --move sgl-kernel/csrc/x.cuh="}},
		{"arpatch patches port --series pcie-2026-07 --to main --move =b", exitUsage, []string{`--move "=b": want OLD=NEW`}},
		{"arpatch patches port --series pcie-2026-07 --to main --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
	})
}

func TestDoctorOpts(t *testing.T) {
	o, err := cmdOptsOf(t, newCmdDoctor, "arpatch doctor")
	if err != nil {
		t.Fatal(err)
	}
	if o.JSON || o.Inspect.Python != "python3" || o.Inspect.ServerCmd != "" || o.Inspect.ServerOptions != nil || o.Inspect.Run == nil || o.Inspect.Probe == nil || o.Inspect.FS == nil {
		t.Errorf("defaults: %+v", o)
	}
	tree := t.TempDir()
	src, err := os.ReadFile("../../harness/doctor/testdata/serverargs/dataclass.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := testrepo.WriteFiles(tree, map[string]string{"python/sglang/srt/server_args.py": string(src)}); err != nil {
		t.Fatal(err)
	}
	o, err = cmdOptsOf(t, newCmdDoctor, "arpatch doctor --json --python /venv/bin/python --src "+tree+" --server-cmd 'python -m sglang.launch_server --tp 2'")
	if err != nil {
		t.Fatal(err)
	}
	if !o.JSON || o.Inspect.Python != "/venv/bin/python" || o.Inspect.ServerCmd != "python -m sglang.launch_server --tp 2" || o.Inspect.ServerOptions == nil {
		t.Errorf("flags: %+v", o)
	}
	cmdRefuses(t, newCmdDoctor, []refusal{
		{"arpatch doctor --src " + tree, exitUsage, []string{"--src reads a --server-cmd", "pass --server-cmd too, or drop --src"}},
		{"arpatch doctor --src nowhere --server-cmd x", exitUsage, []string{"--src nowhere: open nowhere/python/sglang/srt/server_args.py", "pass the SGLang checkout the server runs from"}},
		{"arpatch doctor --server-cmd ''", exitUsage, []string{"--server-cmd was given an empty value"}},
	})
}

func TestBuildOpts(t *testing.T) {
	home := fakeHome(t, "s/", "d/", "x.so")
	t.Setenv("ARPATCH_CACHE", "/cache")
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	o, err := cmdOptsOf(t, newCmdBuild, "arpatch build")
	if err != nil {
		t.Fatal(err)
	}
	b := o.Build
	if b.Src != abs("sglang") || cudaarch.Strings(b.Archs)[0] != "120a" || len(b.Archs) != 1 || b.Jobs != 0 || b.Tool != "auto" || b.Offline || b.DepsDir != "" ||
		b.Python != "python3" || b.Out != "" || b.Cache.Dir != "/cache" || b.Version == "" || len(b.Launcher) != 2 || b.Launcher[1] != "gencode-filter" ||
		o.Check || o.List || o.GC || o.Plan || o.Verify || o.Ext || o.Keep != 10 {
		t.Errorf("defaults: %+v", o)
	}
	o, err = cmdOptsOf(t, newCmdBuild, "arpatch build --recipe baseline --src ~/s --arch 120a,90a --jobs 32 --tool uv --offline --deps-dir ~/d --out ~/o --cache-dir ~/c --python py3 --allreduce-ext --plan")
	if err != nil {
		t.Fatal(err)
	}
	b = o.Build
	if b.Src != home+"/s" || !reflect.DeepEqual(cudaarch.Strings(b.Archs), []string{"120a", "90a"}) || b.Jobs != 32 || b.Tool != "uv" || !b.Offline || b.DepsDir != home+"/d" ||
		b.Python != "py3" || b.Out != home+"/o" || b.Cache.Dir != home+"/c" || !o.Plan || !o.Ext || o.Verify {
		t.Errorf("flags: %+v", o)
	}
	o, err = cmdOptsOf(t, newCmdBuild, "arpatch build --gc --keep 0")
	if err != nil || !o.GC || o.Keep != 0 {
		t.Errorf("--gc --keep 0: %+v, %v", o, err)
	}
	o, err = cmdOptsOf(t, newCmdBuild, "arpatch build --allreduce-ext --verify-reproducible --jobs 0")
	if err != nil || !o.Ext || !o.Verify || o.Build.Jobs != 0 {
		t.Errorf("--allreduce-ext --verify-reproducible: %+v, %v", o, err)
	}
	exclusive := "--check, --allreduce-ext, --list, --gc, --plan and --verify-reproducible are exclusive"
	cmdRefuses(t, newCmdBuild, []refusal{
		{"arpatch build --deps-dir /nonexistent", exitUsage, []string{"--deps-dir /nonexistent: not a directory; create it (mkdir -p /nonexistent)"}},
		{"arpatch build --check --list", exitUsage, []string{exclusive}},
		{"arpatch build --plan --verify-reproducible", exitUsage, []string{exclusive, "except --plan or --verify-reproducible with --allreduce-ext"}},
		{"arpatch build --allreduce-ext --plan --check", exitUsage, []string{exclusive}},
		{"arpatch build --keep 3", exitUsage, []string{"--keep goes with --gc"}},
		{"arpatch build --gc --keep -1", exitUsage, []string{"--keep -1: use 0 or more"}},
		{"arpatch build --jobs -1", exitUsage, []string{"--jobs -1: use 0 to 4096 (0 is one per CPU core)"}},
		{"arpatch build --jobs 100000", exitUsage, []string{"--jobs 100000: use 0 to 4096 (0 is one per CPU core)"}},
		{"arpatch build --arch 120a,,90a", exitUsage, []string{`--arch: "120a,,90a" has an empty arch name`, "write 120a,90a"}},
		{"arpatch build --tool make", exitUsage, []string{`--tool "make": use auto, uv or pip`}},
		{"arpatch build --arch 999", exitUsage, []string{`--arch: unknown CUDA arch "999"`, "use names like 120a"}},
		{"arpatch build --recipe pcie --recipe-file r.toml", exitUsage, []string{"--recipe and --recipe-file are exclusive"}},
		{"arpatch build --jobs x", exitUsage, []string{"--jobs x: want a whole number"}},
	})
}

func TestABBuildOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("ARPATCH_CACHE", "/cache")
	t.Setenv("ARPATCH_STATE", "/state")
	o, err := cmdOptsOf(t, newCmdABBuild, "arpatch ab build")
	if err != nil {
		t.Fatal(err)
	}
	if o.AB.A.Name != "baseline" || o.AB.B.Name != "pcie" || o.AB.Dir != "/state/ab" || o.AB.Repo != "" || o.AB.PlanOnly || o.AB.Build.Cache.Dir != "/cache" || len(o.Verify) != 0 || o.Python != "" {
		t.Errorf("defaults: %+v", o)
	}
	o, err = cmdOptsOf(t, newCmdABBuild, "arpatch ab build --a pcie --b baseline --dir ~/ab --repo ~/m.git --commit c0ffee --arch 90a --jobs 8 --offline --cache-dir ~/c --python py --python-b pyb --plan")
	if err != nil {
		t.Fatal(err)
	}
	ab := o.AB
	if ab.A.Name != "pcie" || ab.B.Name != "baseline" || ab.Dir != "/home/u/ab" || ab.Repo != "/home/u/m.git" || ab.Commit != "c0ffee" || !ab.PlanOnly ||
		ab.PythonA != "" || ab.PythonB != "pyb" || ab.Build.Python != "py" || ab.Build.Jobs != 8 || !ab.Build.Offline || cudaarch.Strings(ab.Build.Archs)[0] != "90a" ||
		!reflect.DeepEqual(o.Verify, []string{"--arch", "90a", "--jobs", "8", "--cache-dir", "~/c", "--offline"}) || o.Python != "py" {
		t.Errorf("flags: %+v", o)
	}
	// A recipe whose [build] tool differs from pcie's: the flag decides.
	base, err := recipes.Embedded("baseline")
	if err != nil {
		t.Fatal(err)
	}
	enc, err := base.Encode()
	if err != nil {
		t.Fatal(err)
	}
	pip := filepath.Join(t.TempDir(), "pip.toml")
	if err := os.WriteFile(pip, bytes.Replace(enc, []byte(`tool = "auto"`), []byte(`tool = "pip"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err = cmdOptsOf(t, newCmdABBuild, "arpatch ab build --a-file "+pip+" --tool uv")
	if err != nil || o.AB.A.Build.Tool != "pip" || o.AB.Build.Tool != "uv" {
		t.Errorf("--a-file --tool uv: %+v, %v", o, err)
	}
	cmdRefuses(t, newCmdABBuild, []refusal{
		{"arpatch ab build --a-file " + pip, exitUsage, []string{"[build] tool", `"pip"`, "pass --tool to build both arms alike"}},
		// Not flags of ab build (its --help does not list them).
		{"arpatch ab build --recipe pcie", exitUsage, []string{"unknown flag --recipe"}},
		{"arpatch ab build --recipe-file r.toml", exitUsage, []string{"unknown flag --recipe-file"}},
		{"arpatch ab build --src s", exitUsage, []string{"unknown flag --src"}},
		{"arpatch ab build --a pcie --a-file x.toml", exitUsage, []string{"--a and --a-file are exclusive; pass one"}},
		{"arpatch ab build --b nosuch", exitUsage, []string{`--b: no recipe named "nosuch"`, "known recipes", "(or use --b-file PATH)"}},
		{"arpatch ab build --jobs -2", exitUsage, []string{"--jobs -2: use 0 to 4096 (0 is one per CPU core)"}},
		{"arpatch ab build --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
	})
}

func TestBenchAllreduceOpts(t *testing.T) {
	home := fakeHome(t, "s/", "d/", "x.so")
	o, err := cmdOptsOf(t, newCmdBenchAllreduce, "arpatch bench allreduce")
	if err != nil {
		t.Fatal(err)
	}
	r := o.Run
	// 4K..1M, and the verify size: 4 tokens x 5120 x bf16 = 40960 bytes.
	if r.WorldSize != 2 || len(r.Sizes) != 10 || r.Sizes[0] != 4096 || !slices.Contains(r.Sizes, 40960) || !reflect.DeepEqual(r.Impls, allreduce.KnownImpls) ||
		!reflect.DeepEqual(r.Branches, []string{"nvlink", "pcie"}) || !reflect.DeepEqual(r.Modes, []string{"eager", "graph"}) || !r.NCCLDebug ||
		r.Python != "python3" || r.Timeout != 10*time.Minute || r.Warmup != 10 || r.Inner != 20 || r.Reps != 30 ||
		o.Verify.Count != 122 || o.Verify.Bytes != 40960 || o.Ext.Src != "sglang" || o.Ext.Ext != "" || o.Log != "" || o.JSON != "" {
		t.Errorf("defaults: %+v", o)
	}
	o, err = cmdOptsOf(t, newCmdBenchAllreduce, "arpatch bench allreduce --world-size 8 --sizes 4K --shape 2x4096 --count 60 --impl nccl,custom-auto --branches pcie --modes graph --nccl-debug=false --ext ~/x.so --arch 120a --timeout 1m --warmup 0 --inner 5 --reps 3 --log ~/l --json ~/r.json")
	if err != nil {
		t.Fatal(err)
	}
	r = o.Run
	if r.WorldSize != 8 || !reflect.DeepEqual(r.Sizes, []int{4096, 16384}) || !reflect.DeepEqual(r.Impls, []string{"nccl", "custom-auto"}) || !reflect.DeepEqual(r.Branches, []string{"pcie"}) ||
		!reflect.DeepEqual(r.Modes, []string{"graph"}) || r.NCCLDebug || r.Timeout != time.Minute || r.Warmup != 0 || r.Inner != 5 || r.Reps != 3 ||
		o.Verify.Count != 60 || o.Verify.Bytes != 16384 || o.Ext.Ext != home+"/x.so" || !reflect.DeepEqual(o.Ext.Arch, []string{"120a"}) || !o.Ext.Given["arch"] || o.Log != home+"/l" || o.JSON != home+"/r.json" {
		t.Errorf("flags: %+v", o)
	}
	cmdRefuses(t, newCmdBenchAllreduce, []refusal{
		{"arpatch bench allreduce --ext /nonexist.so", exitUsage, []string{"--ext /nonexist.so: no such file or directory"}},
		{"arpatch bench allreduce --ext ~/s", exitUsage, []string{"--ext " + home + "/s: is a directory; name a file"}},
		{"arpatch bench allreduce --world-size 3", exitUsage, []string{"--world-size 3: custom allreduce supports world sizes 2, 4, 6 and 8"}},
		{"arpatch bench allreduce --sizes lots", exitUsage, []string{"--sizes:"}},
		// Issue 14 tester, F: the flag is named once.
		{"arpatch bench allreduce --shape 4x", exitUsage, []string{`--shape: "4x": want TOKENSxHIDDEN, e.g. 4x5120`}},
		{"arpatch bench allreduce --shape 4by5120", exitUsage, []string{"--shape:"}},
		{"arpatch bench allreduce --shape 1000000x1000000", exitUsage, []string{`--shape: "1000000x1000000" is more than 1T bytes of bf16`}},
		{"arpatch bench allreduce --impl nccl,custom-3stage", exitUsage, []string{`--impl "custom-3stage": known implementations are nccl`}},
		{"arpatch bench allreduce --impl ,", exitUsage, []string{`--impl: ",": item 1 of 2 is empty`}},
		{"arpatch bench allreduce --branches nvswitch", exitUsage, []string{`--branches "nvswitch": use nvlink, pcie`}},
		{"arpatch bench allreduce --modes ,", exitUsage, []string{`--modes: ",": item 1 of 2 is empty`}},
		{"arpatch bench allreduce --count 0", exitUsage, []string{"--count 0: use 1 or more"}},
		{"arpatch bench allreduce --inner 0", exitUsage, []string{"--inner 0: use 1 or more"}},
		{"arpatch bench allreduce --warmup -1", exitUsage, []string{"--warmup -1: use 0 or more"}},
		{"arpatch bench allreduce --timeout 0s", exitUsage, []string{"--timeout 0s: use a positive duration, e.g. 10m"}},
		{"arpatch bench allreduce --timeout 5", exitUsage, []string{"--timeout 5: want a duration"}},
	})
}

func TestTuneAllreduceOpts(t *testing.T) {
	home := fakeHome(t, "s/", "d/", "x.so")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := cmdOptsOf(t, newCmdTuneAllreduce, "arpatch tune allreduce --out "+dir+"/tune.env")
	if err != nil {
		t.Fatal(err)
	}
	// The pcie recipe's [bench]: TP 8, 4 draft tokens.
	b := o.Tune.Bench
	if b.WorldSize != 8 || b.Python != "python3" || !b.NCCLDebug || b.Timeout != 10*time.Minute || o.Tune.Verify.Shape != (allreduce.Shape{Tokens: 4, Hidden: 5120, ElemBytes: 2}) || o.Tune.Verify.Bytes != 40960 ||
		!reflect.DeepEqual(o.Tune.Sizes, tune.ServingSizes(5120, 4)) || !reflect.DeepEqual(o.Tune.Modes, []string{"eager", "graph"}) || o.Out != dir+"/tune.env" ||
		o.Tune.Rebuild != "arpatch build --allreduce-ext --src sglang" || o.Ext.Src != "sglang" {
		t.Errorf("defaults: %+v", o)
	}
	o, err = cmdOptsOf(t, newCmdTuneAllreduce, "arpatch tune allreduce --world-size 4 --hidden 4096 --draft-tokens 8 --sizes 4K,8K --modes graph --src ~/s --arch 90a --cache-dir ~/c --out "+dir+"/t.env --json "+dir+"/t.json")
	if err != nil {
		t.Fatal(err)
	}
	if o.Tune.Bench.WorldSize != 4 || o.Tune.Verify.Shape != (allreduce.Shape{Tokens: 8, Hidden: 4096, ElemBytes: 2}) || !reflect.DeepEqual(o.Tune.Sizes, []int{4096, 8192}) ||
		!reflect.DeepEqual(o.Tune.Modes, []string{"graph"}) || o.JSON != dir+"/t.json" ||
		o.Tune.Rebuild != "arpatch build --allreduce-ext --src "+home+"/s --arch 90a --cache-dir '~/c'" {
		t.Errorf("flags: %+v (rebuild %s)", o, o.Tune.Rebuild)
	}
	o, err = cmdOptsOf(t, newCmdTuneAllreduce, "arpatch tune allreduce --ext ~/x.so --out "+dir+"/t.env")
	if err != nil || o.Tune.Rebuild != "" || o.Ext.Ext != home+"/x.so" {
		t.Errorf("--ext: %+v, %v", o, err)
	}
	cmdRefuses(t, newCmdTuneAllreduce, []refusal{
		{"arpatch tune allreduce --ext /nonexist.so", exitUsage, []string{"--ext /nonexist.so: no such file or directory"}},
		{"arpatch tune allreduce --world-size 3", exitUsage, []string{"--world-size 3: custom allreduce supports world sizes 2, 4, 6 and 8"}},
		{"arpatch tune allreduce --hidden 0", exitUsage, []string{"--hidden 0: use positive numbers", "e.g. --draft-tokens 4 --hidden 5120"}},
		{"arpatch tune allreduce --draft-tokens -1", exitUsage, []string{"--draft-tokens -1"}},
		{"arpatch tune allreduce --sizes x", exitUsage, []string{"--sizes:"}},
		{"arpatch tune allreduce --modes cuda", exitUsage, []string{`--modes "cuda": use eager, graph`}},
		{"arpatch tune allreduce --reps 0", exitUsage, []string{"--reps 0: use 1 or more"}},
		{"arpatch tune allreduce --out " + dir + "/file/t.env", exitUsage, []string{"--out:"}},
		{"arpatch tune allreduce --recipe nosuch", exitUsage, []string{`--recipe: no recipe named "nosuch"`}},
	})
}

func TestBenchOpts(t *testing.T) {
	home := fakeHome(t, "s/", "d/", "x.so")
	t.Setenv("ARPATCH_STATE", "/state")
	o, err := cmdOptsOf(t, newCmdBench, "arpatch bench --model /m --draft-model /d")
	if err != nil {
		t.Fatal(err)
	}
	b := o.Bench
	var names []string
	for _, a := range b.Arms {
		names = append(names, a.Name)
		if a.Python != "python3" || a.URL != "" || a.LaunchCmd != "" {
			t.Errorf("arm %+v", a)
		}
	}
	// The pcie recipe's [bench]: TP 8, arms baseline and pcie.
	if b.Model != "/m" || b.DraftModel != "/d" || b.TP != 8 || !reflect.DeepEqual(names, []string{"baseline", "pcie"}) || b.Arms[1].Env["SGLANG_FORCE_CUSTOM_AR_PCIE"] != "1" ||
		b.LogDir != "/state/bench-logs" || !b.Interleave || b.Force || b.AgreeTokens != sglang.DefaultAgreeTokens ||
		o.Preflight || o.Tune != (tuneFlags{}) || len(o.TuneInputs) != 0 || o.Reports != (benchReports{}) || o.Settings.TP != 8 {
		t.Errorf("defaults: %+v", o)
	}
	dir := t.TempDir()
	o, err = cmdOptsOf(t, newCmdBench, "arpatch bench --recipe baseline --tp 2 --trials 3 --warmup 0 --concurrency 1,4 --no-interleave --launch-cmd 'fake --port {port}' "+
		"--arm 'algo1:env.SGLANG_CUSTOM_ALLREDUCE_ALGO=1stage,python=py1' --baseline baseline --python py --agree-tokens 16 --log-dir ~/logs "+
		"--preflight --ext ~/x.so --force --tune ~/t.env --force-tune --json "+dir+"/b.json --markdown "+dir+"/b.md --benchfmt "+dir+"/b.txt --plot "+dir+"/b.svg")
	if err != nil {
		t.Fatal(err)
	}
	b = o.Bench
	last := b.Arms[len(b.Arms)-1]
	if b.TP != 2 || b.Trials != 3 || b.Warmup != 0 || !reflect.DeepEqual(b.Concurrency, []int{1, 4}) || b.Interleave || b.Baseline != "baseline" || b.AgreeTokens != 16 || b.LogDir != home+"/logs" || !b.Force ||
		last.Name != "algo1" || last.Python != "py1" || last.LaunchCmd != "fake --port {port}" || last.Env["SGLANG_CUSTOM_ALLREDUCE_ALGO"] != "1stage" || b.Arms[0].Python != "py" ||
		!o.Preflight || o.Ext != home+"/x.so" || o.Python != "py" || o.Tune != (tuneFlags{Tune: home + "/t.env", ForceTune: true}) ||
		!reflect.DeepEqual(o.TuneInputs, []string{"--ext", home + "/x.so", "--python", "py"}) ||
		o.Reports != (benchReports{JSON: dir + "/b.json", Markdown: dir + "/b.md", Benchfmt: dir + "/b.txt", Plot: dir + "/b.svg"}) {
		t.Errorf("flags: %+v", o)
	}
	// --url alone, with the recipe's two arms: one arm measuring that
	// server, and a note that says so.
	o, err = cmdOptsOf(t, newCmdBench, "arpatch bench --url http://h:1")
	if err != nil || len(o.Bench.Arms) != 1 || o.Bench.Arms[0].Name != "server" || o.Bench.Arms[0].URL != "http://h:1" || o.Bench.Baseline != "server" ||
		len(o.Bench.Notes) != 1 || !strings.Contains(o.Bench.Notes[0], "one server, measured as one arm named server; the recipe's arms (baseline, pcie) are an A/B") {
		t.Errorf("--url alone: %+v, %v", o.Bench, err)
	}
	// --url with an --arm of its own server: two arms, the --url server
	// as the baseline and the added arm, not the recipe's two plus one.
	o, err = cmdOptsOf(t, newCmdBench, "arpatch bench --url http://h:1 --arm x:url=http://h:2")
	if err != nil {
		t.Fatal(err)
	}
	if a := o.Bench.Arms; len(a) != 2 || a[0].Name != "server" || a[0].URL != "http://h:1" || a[1].Name != "x" || a[1].URL != "http://h:2" || o.Bench.Baseline != "server" ||
		len(o.Bench.Notes) != 1 || !strings.Contains(o.Bench.Notes[0], "one arm named server, the baseline against the arms --arm adds (x); the recipe's arms (baseline, pcie)") {
		t.Errorf("--url with --arm x:url=: %+v", o.Bench)
	}
	// An --arm that changes a recipe arm keeps the recipe's A/B: then
	// --url serves the other one, and pcie has its own server.
	o, err = cmdOptsOf(t, newCmdBench, "arpatch bench --url http://h:1 --arm pcie:url=http://h:2")
	if a := o.Bench.Arms; err != nil || len(a) != 2 || a[0].Name != "baseline" || a[0].URL != "http://h:1" || a[1].Name != "pcie" || a[1].URL != "http://h:2" || len(o.Bench.Notes) != 0 {
		t.Errorf("--url with --arm pcie:url=: %+v, %v", o.Bench, err)
	}
	// The load and the serving selection: a rate opens the loop, with no
	// cap on requests in flight unless --max-concurrency (--concurrency)
	// gives one; without a rate, nothing is open and the selection is
	// vLLM's default.
	if !reflect.DeepEqual(b.Serving, stats.DefaultSelection) || b.Arrivals != (workload.Arrivals{}) {
		t.Errorf("load defaults: %+v %+v", b.Serving, b.Arrivals)
	}
	o, err = cmdOptsOf(t, newCmdBench, "arpatch bench --num-prompts 12 --request-rate 2.5 --burstiness 0.5 --seed 9 --percentile-metrics e2el,itl --metric-percentiles 50,99.9 --launch-cmd 'fake {port}'")
	if err != nil {
		t.Fatal(err)
	}
	if b := o.Bench; b.Arrivals != (workload.Arrivals{Rate: 2.5, Burstiness: 0.5, Seed: 9}) || !reflect.DeepEqual(b.Concurrency, []int{12}) ||
		!reflect.DeepEqual(b.Serving, stats.Selection{Metrics: []string{"itl", "e2el"}, Percentiles: []float64{50, 99.9}}) ||
		o.Settings.RequestRate != 2.5 || o.Settings.Burstiness != 0.5 || o.Settings.Seed != 9 {
		t.Errorf("load: %+v %+v %+v", b.Arrivals, b.Concurrency, o.Settings)
	}
	o, err = cmdOptsOf(t, newCmdBench, "arpatch bench --request-rate 8 --burstiness inf --max-concurrency 4 --launch-cmd 'fake {port}'")
	if err != nil || !reflect.DeepEqual(o.Bench.Concurrency, []int{4}) || o.Settings.Burstiness != "inf" {
		t.Errorf("--max-concurrency with a rate: %+v %+v, %v", o.Bench.Concurrency, o.Settings, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	launch := " --launch-cmd 'fake {port}'"
	cmdRefuses(t, newCmdBench, []refusal{
		{"arpatch bench --request-rate -2" + launch, exitUsage, []string{"--request-rate -2: want requests per second above 0"}},
		{"arpatch bench --request-rate NaN" + launch, exitUsage, []string{"--request-rate NaN"}},
		{"arpatch bench --request-rate 4 --burstiness 0" + launch, exitUsage, []string{"--burstiness 0: want a gamma shape above 0"}},
		{"arpatch bench --seed 3" + launch, exitUsage, []string{"--seed shapes the arrivals of --request-rate, which is inf", "add --request-rate R, or leave --seed out"}},
		{"arpatch bench --request-rate 4 --seed -1" + launch, exitUsage, []string{"--seed -1: want 0 or more"}},
		{"arpatch bench --percentile-metrics ttft,bogus" + launch, exitUsage, []string{`percentile metric "bogus": use any of ttft, tpot, itl, e2el`}},
		{"arpatch bench --metric-percentiles 99,99" + launch, exitUsage, []string{"metric percentile 99 is given twice"}},
		{"arpatch bench --prompts nope.jsonl" + launch, exitUsage, []string{"--prompts: open nope.jsonl: no such file or directory"}},
		{"arpatch bench --ext ~/x.so" + launch, exitUsage, []string{"--ext goes with --preflight", "or --tune", "add --preflight, or leave --ext out"}},
		{"arpatch bench --preflight --ext /nonexist.so" + launch, exitUsage, []string{"--ext /nonexist.so: no such file or directory"}},
		{"arpatch bench", exitUsage, []string{"arm baseline needs a server", "pass --model (and --draft-model) to launch SGLang, --launch-cmd TEMPLATE, or --url URL"}},
		{"arpatch bench --url http://h:1 --launch-cmd x", exitUsage, []string{"--url attaches to a running server and --launch-cmd starts one: pass one of them"}},
		{"arpatch bench --url h:1", exitUsage, []string{"--url h:1 is not a server URL: give http://HOST:PORT (e.g. http://h:1)"}},
		{"arpatch bench --url 127.0.0.1:39111", exitUsage, []string{"--url 127.0.0.1:39111 is not a server URL: give http://HOST:PORT (e.g. http://127.0.0.1:39111)"}},
		{"arpatch bench --url http://h:1 --baseline pcie", exitUsage, []string{"--url http://h:1 would serve 2 arms (baseline, pcie)", "--arm NAME:url=URL, or --launch-cmd"}},
		{"arpatch bench --url http://h:1 --arm x:env.A=1", exitUsage, []string{"--url http://h:1 would serve 2 arms (server, x)"}},
		{"arpatch bench --arm 'x:bogus=1'" + launch, exitUsage, []string{`--arm x: unknown key "bogus"`}},
		{"arpatch bench --arm 'x:args=--tp 2,launch-cmd=y'" + launch, exitUsage, []string{"--arm x: args= are server arguments for the built-in launch", "with launch-cmd= put them in the command"}},
		{"arpatch bench --arm 'x:url=http://h:1,env.A=1'" + launch, exitUsage, []string{"--arm x: url= attaches to a running server, so env.VAR= would not apply"}},
		{"arpatch bench --baseline nosuch" + launch, exitUsage, []string{`--baseline "nosuch" is not an arm (arms: baseline, pcie)`}},
		{"arpatch bench --trials 0" + launch, exitUsage, []string{"--trials 0"}},
		{"arpatch bench --agree-tokens 0" + launch, exitUsage, []string{"--agree-tokens 0"}},
		{"arpatch bench --concurrency 4,1" + launch, exitUsage, []string{"--concurrency"}},
		{"arpatch bench --agree-threshold 2" + launch, exitUsage, []string{"--agree-threshold", "(0 turns the check off)"}},
		{"arpatch bench --ready-timeout 0s" + launch, exitUsage, []string{"--ready-timeout"}},
		{"arpatch bench --plot b.txt" + launch, exitUsage, []string{"--plot"}},
		{"arpatch bench --json " + dir + "/file/b.json" + launch, exitUsage, []string{"--json:"}},
		{"arpatch bench --recipe nosuch" + launch, exitUsage, []string{`--recipe: no recipe named "nosuch"`}},
	})
}

func TestNightlyOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "nightly.toml")
	if err := os.WriteFile(cfg, []byte("[bench]\nmodel = \"/m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := cmdOptsOf(t, newCmdNightly, "arpatch nightly --config "+cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := o.Run
	if o.ConfigPath != cfg || r.Config == nil || r.SkipBuild || r.SkipBench || r.Version == "" || len(r.Launcher) != 2 ||
		!reflect.DeepEqual(r.Reports, map[string]string{"github-benchmark": "", "bencher": "", "junit": "", "summary": ""}) || r.Log != nil || r.Out != nil {
		t.Errorf("defaults: %+v", o)
	}
	o, err = cmdOptsOf(t, newCmdNightly, "arpatch nightly --config "+cfg+" --skip-build --skip-bench --github-benchmark "+dir+"/gh --bencher "+dir+"/b.json --junit "+dir+"/j.xml --summary "+dir+"/s.md")
	if err != nil {
		t.Fatal(err)
	}
	if r := o.Run; !r.SkipBuild || !r.SkipBench || !reflect.DeepEqual(r.Reports, map[string]string{"github-benchmark": dir + "/gh", "bencher": dir + "/b.json", "junit": dir + "/j.xml", "summary": dir + "/s.md"}) {
		t.Errorf("flags: %+v", o)
	}
	cmdRefuses(t, newCmdNightly, []refusal{
		{"arpatch nightly", exitUsage, []string{"--config is required"}},
		{"arpatch nightly --config " + dir + "/nosuch.toml", exitUsage, []string{"nosuch.toml"}},
		{"arpatch nightly --config " + cfg + " --github-benchmark out/", exitUsage, []string{"--github-benchmark out/: give a file prefix, e.g. out/bench"}},
		{"arpatch nightly --config " + cfg + " --junit " + dir + "/file/j.xml", exitUsage, []string{"--junit / outputs.junit"}},
	})
}

func TestHistoryOpts(t *testing.T) {
	home := fakeHome(t, "h.db")
	t.Setenv("ARPATCH_STATE", "/state")
	l, err := cmdOptsOf(t, newCmdHistoryList, "arpatch history list")
	if err != nil || l != (historyListOptions{DB: historyTarget{"/state/history.db", "db"}, Limit: 30}) {
		t.Errorf("list: %+v, %v", l, err)
	}
	l, err = cmdOptsOf(t, newCmdHistoryList, "arpatch history list --db ~/h.db --limit 5")
	if err != nil || l != (historyListOptions{DB: historyTarget{home + "/h.db", "db"}, Limit: 5}) {
		t.Errorf("list: %+v, %v", l, err)
	}
	if r, err := cmdOptsOf(t, newCmdHistoryAccept, "arpatch history accept --db ~/h.db 3"); err != nil || r != (historyRunOptions{DB: historyTarget{home + "/h.db", "db"}, Run: 3}) {
		t.Errorf("accept: %+v, %v", r, err)
	}
	for _, c := range []struct {
		argv string
		json bool
	}{{"arpatch history show 3 --db ~/h.db", false}, {"arpatch history show 3 --json --db ~/h.db", true}} {
		r, err := cmdOptsOf(t, newCmdHistoryShow, c.argv)
		if err != nil || r != (historyShowOptions{historyRunOptions{DB: historyTarget{home + "/h.db", "db"}, Run: 3}, c.json}) {
			t.Errorf("%s: %+v, %v", c.argv, r, err)
		}
	}
	e, err := cmdOptsOf(t, newCmdHistoryExport, "arpatch history export --format json")
	if err != nil || e != (historyExportOptions{DB: historyTarget{"/state/history.db", "db"}, Format: "json"}) {
		t.Errorf("export: %+v, %v", e, err)
	}
	p, err := cmdOptsOf(t, newCmdHistoryPlot, "arpatch history plot --metric tpot_ms_p99 --out ~/p.svg --hardware hw --workload wl --concurrency 4")
	if err != nil || p.Metric.Name != "tpot_ms_p99" || p.Out != home+"/p.svg" || p.X != "time" || p.Series != (history.Series{HardwareKey: "hw", Workload: "wl", Level: 4}) || p.DB != (historyTarget{"/state/history.db", "db"}) {
		t.Errorf("plot: %+v, %v", p, err)
	}
	p, err = cmdOptsOf(t, newCmdHistoryPlot, "arpatch history plot --x concurrency --run 7 --out p.png")
	if err != nil || p.Metric.Name != stats.TokS || p.X != "concurrency" || p.Run != 7 {
		t.Errorf("plot --x concurrency: %+v, %v", p, err)
	}
	for _, c := range []struct {
		cmd string
		r   refusal
	}{
		{"show", refusal{"arpatch history show", exitUsage, []string{"history show takes one run number", "arpatch history list shows them"}}},
		{"show", refusal{"arpatch history show 0", exitUsage, []string{"history show takes one run number"}}},
		{"accept", refusal{"arpatch history accept 1 2", exitUsage, []string{"history accept takes one run number"}}},
		{"accept", refusal{"arpatch history accept x", exitUsage, []string{"history accept takes one run number"}}},
		{"show", refusal{"arpatch history show 3 --bogus", exitUsage, []string{"unknown flag --bogus"}}},
	} {
		var err error
		if c.cmd == "show" {
			_, err = cmdOptsOf(t, newCmdHistoryShow, c.r.argv)
		} else {
			_, err = cmdOptsOf(t, newCmdHistoryAccept, c.r.argv)
		}
		checkRefusal(t, c.r, err)
	}
	cmdRefuses(t, newCmdHistoryExport, []refusal{
		{"arpatch history export --format xml", exitUsage, []string{`--format "xml": use csv or json`}},
	})
	cmdRefuses(t, newCmdHistoryPlot, []refusal{
		{"arpatch history plot", exitUsage, []string{"--out is required"}},
		{"arpatch history plot --metric speed --out p.svg", exitUsage, []string{`--metric "speed": use one of tok_s`}},
		{"arpatch history plot --out p.txt", exitUsage, []string{"--out"}},
		{"arpatch history plot --x runs --out p.svg", exitUsage, []string{`--x "runs": use time or concurrency`}},
		{"arpatch history plot --concurrency -1 --out p.svg", exitUsage, []string{"--concurrency -1: use 1 to 4096 (leave it out for the newest run's lowest level)"}},
		{"arpatch history plot --concurrency 0 --out p.svg", exitUsage, []string{"--concurrency 0: use 1 to"}},
	})
	cmdRefuses(t, newCmdHistoryList, []refusal{
		{"arpatch history list --limit -1", exitUsage, []string{"--limit -1: use 1 or more, or 0 for every run"}},
		{"arpatch history list --limit x", exitUsage, []string{"--limit x: want a whole number"}},
		{"arpatch history list 3", exitUsage, []string{"list takes no arguments"}},
		// A --db that names nothing: exit 2 naming the flag, before any run.
		{"arpatch history list --db /nonexistent/h.db", exitUsage, []string{"--db /nonexistent/h.db: no such file or directory"}},
	})
}

func TestRecipesOpts(t *testing.T) {
	// A recipe whose workload names a file beside it that is not there.
	bad := filepath.Join(t.TempDir(), "r.toml")
	if err := os.WriteFile(bad, []byte("name = \"r\"\n[upstream]\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n[bench]\nworkload = \"p.jsonl\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := cmdOptsOf(t, newCmdRecipesShow, "arpatch recipes show baseline")
	if err != nil || r.Name != "baseline" {
		t.Errorf("show baseline: %v, %v", r, err)
	}
	cmdRefuses(t, newCmdRecipesShow, []refusal{
		{"arpatch recipes show", exitUsage, []string{"recipes show takes one recipe NAME or --recipe-file PATH"}},
		{"arpatch recipes show pcie baseline", exitUsage, []string{"recipes show takes one recipe NAME"}},
		{"arpatch recipes show pcie --recipe-file r.toml", exitUsage, []string{"recipes show takes one recipe NAME or --recipe-file PATH"}},
		{"arpatch recipes show nosuch", exitUsage, []string{`no recipe named "nosuch"`, "known recipes"}},
		{"arpatch recipes show --recipe-file nosuch.toml", exitUsage, []string{"--recipe-file: open nosuch.toml: no such file or directory"}},
		{"arpatch recipes show --recipe-file " + bad, exitUsage, []string{bad + ":5: bench.workload: open " + filepath.Join(filepath.Dir(bad), "p.jsonl") + ": no such file or directory (a relative path is relative to the recipe's directory)"}},
	})
	cmdRefuses(t, newCmdRecipes, []refusal{
		{"arpatch recipes bogus", exitUsage, []string{`recipes takes no arguments, got ["bogus"]`}},
	})
}

func TestFakeSGLangOpts(t *testing.T) {
	o, err := cmdOptsOf(t, newCmdFakeSGLang, "arpatch fake-sglang --port 8000 --rate 2000 --ttft 2ms --variant x --empty")
	if err != nil || o.Port != 8000 || o.Server.TokPerSec != 2000 || o.Server.TTFT != 2*time.Millisecond || o.Server.TokensPerChunk != 3 || o.Server.AcceptLength != 3 || o.Server.Variant != "x" || !o.Server.Empty {
		t.Errorf("%+v, %v", o, err)
	}
	cmdRefuses(t, newCmdFakeSGLang, []refusal{
		{"arpatch fake-sglang", exitUsage, []string{"--port is required"}},
		{"arpatch fake-sglang --port 1 --rate -1", exitUsage, []string{"--rate"}},
	})
	argv, err := cmdOptsOf(t, newCmdGencodeFilter, "arpatch gencode-filter nvcc -O3 -c x.cu")
	if err != nil || !reflect.DeepEqual(argv, []string{"nvcc", "-O3", "-c", "x.cu"}) {
		t.Errorf("gencode-filter: %q, %v", argv, err)
	}
	cmdRefuses(t, newCmdGencodeFilter, []refusal{{"arpatch gencode-filter", exitUsage, []string{"gencode-filter needs a compiler command"}}})
}

// TestTuneFileMissing: a --tune that names nothing is a usage error (exit
// 2) naming the flag, for apply and bench, before anything is cloned or
// started.
func TestTuneFileMissing(t *testing.T) {
	dir := t.TempDir()
	for _, argv := range [][]string{
		{"arpatch", "apply", "--tune", "/nope.env", "--src", filepath.Join(dir, "nosrc")},
		{"arpatch", "bench", "--recipe", "baseline", "--tune", "/nope.env", "--url", "http://127.0.0.1:1"},
	} {
		var stderr bytes.Buffer
		code := run(t.Context(), argv, io.Discard, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--tune: open /nope.env: no such file or directory") {
			t.Errorf("%v: exit %d, %q", argv, code, stderr.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "nosrc")); err == nil {
			t.Errorf("%v: cloned before refusing", argv)
		}
	}
}
