package main

import (
	"os"
	"reflect"
	"testing"

	"github.com/arpatch/arpatch/internal/testrepo"
)

// The options functions' table tests: a command line, parsed by urfave/cli
// through the adapter, turned into the command's options; and the
// command lines each refuses, with the exit code and what the message
// names (the flag, the remedy).

func TestApplyOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	o, err := optsOf(t, applyOpts, "arpatch apply")
	if err != nil {
		t.Fatal(err)
	}
	a := o.Apply
	if a.Recipe.Name != "pcie" || a.Src != "sglang" || a.Repo != "" || a.Commit != "" || a.Series != "" || a.DryRun || a.Catalog == nil || len(a.Catalog.Series) == 0 || o.Tune != (tuneFlags{}) {
		t.Errorf("defaults: %+v %+v", a, o.Tune)
	}
	o, err = optsOf(t, applyOpts, "arpatch apply --recipe baseline --src ~/s --repo ~/m.git --commit c0ffee --series pcie-2026-07 --dry-run --tune ~/t.env --force-tune")
	if err != nil {
		t.Fatal(err)
	}
	a = o.Apply
	if a.Recipe.Name != "baseline" || a.Src != "/home/u/s" || a.Repo != "/home/u/m.git" || a.Commit != "c0ffee" || a.Series != "pcie-2026-07" || !a.DryRun ||
		o.Tune != (tuneFlags{Tune: "/home/u/t.env", ForceTune: true}) {
		t.Errorf("flags: %+v %+v", a, o.Tune)
	}
	refuses(t, applyOpts, []refusal{
		{"arpatch apply --recipe pcie --recipe-file x.toml", exitUsage, []string{"--recipe and --recipe-file are exclusive", "pass one"}},
		{"arpatch apply --recipe nosuch", exitUsage, []string{`--recipe: no recipe named "nosuch"`, "known recipes: baseline, pcie", "--recipe-file PATH"}},
		{"arpatch apply --recipe-file nosuch.toml", exitUsage, []string{"--recipe-file", "nosuch.toml"}},
		{"arpatch apply --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch apply --series ''", exitUsage, []string{"--series was given an empty value"}},
		{"arpatch apply stray", exitUsage, []string{`apply takes no arguments, got ["stray"]`, "flags go before arguments"}},
		{"arpatch apply --dry-run=maybe", exitUsage, []string{"-dry-run"}},
	})
}

func TestRevertOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	for _, c := range []struct {
		argv               string
		src                string
		force, dryRun, own bool
	}{
		{"arpatch revert", "sglang", false, false, false},
		{"arpatch revert --src ~/s --force --dry-run", "/home/u/s", true, true, false},
		{"arpatch revert --patches-dir ../../patches/sglang", "sglang", false, false, true},
	} {
		o, err := optsOf(t, revertOpts, c.argv)
		if err != nil {
			t.Errorf("%s: %v", c.argv, err)
			continue
		}
		if o.Src != c.src || o.Force != c.force || o.DryRun != c.dryRun || o.Catalog == nil || (o.Catalog.Dir == "../../patches/sglang") != c.own {
			t.Errorf("%s: %+v (catalog dir %q)", c.argv, o, o.Catalog.Dir)
		}
	}
	refuses(t, revertOpts, []refusal{
		{"arpatch revert --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch revert sglang", exitUsage, []string{"revert takes no arguments", "flags go before arguments"}},
		{"arpatch revert --src ''", exitUsage, []string{"--src was given an empty value"}},
	})
}

func TestStatusOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	o, err := optsOf(t, statusOpts, "arpatch status")
	if err != nil || o.Src != "sglang" || o.JSON || o.Catalog == nil {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	o, err = optsOf(t, statusOpts, "arpatch status --json --src ~/s")
	if err != nil || o.Src != "/home/u/s" || !o.JSON {
		t.Errorf("flags: %+v, %v", o, err)
	}
	refuses(t, statusOpts, []refusal{
		{"arpatch status --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch status --json=yes", exitUsage, []string{"-json"}},
		{"arpatch status sglang", exitUsage, []string{"status takes no arguments"}},
	})
}

func TestPatchesOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	cat, err := optsOf(t, patchesListOpts, "arpatch patches list")
	if err != nil || len(cat.Series) == 0 || cat.Dir != "" {
		t.Errorf("list: %v, dir %q", err, cat.Dir)
	}
	o, err := optsOf(t, patchesCheckOpts, "arpatch patches check --repo ~/m.git --commit main --commit v1 --series pcie-2026-07 --strict --json")
	if err != nil {
		t.Fatal(err)
	}
	if o.Repo != "/home/u/m.git" || o.RepoArg != "~/m.git" || !reflect.DeepEqual(o.Commits, []string{"main", "v1"}) || !reflect.DeepEqual(o.Series, []string{"pcie-2026-07"}) || !o.Strict || !o.JSON {
		t.Errorf("check: %+v", o)
	}
	// Flags after the arguments move in front of them.
	dirs, err := optsOf(t, patchesSealOpts, "arpatch patches seal a b")
	if err != nil || !reflect.DeepEqual(dirs, []string{"a", "b"}) {
		t.Errorf("seal: %q, %v", dirs, err)
	}
	refuses(t, patchesListOpts, []refusal{
		{"arpatch patches list --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch patches list x", exitUsage, []string{"list takes no arguments"}},
	})
	refuses(t, patchesCheckOpts, []refusal{
		{"arpatch patches check --commit main", exitUsage, []string{`Required flag "repo" not set`}},
		{"arpatch patches check --repo m", exitUsage, []string{`Required flag "commit" not set`}},
		{"arpatch patches check --repo m --commit main --series nosuch", exitUsage, []string{"--series", "nosuch"}},
		{"arpatch patches check --repo m --commit main --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
		{"arpatch patches check --repo m --commit main x", exitUsage, []string{"check takes no arguments"}},
	})
	refuses(t, patchesSealOpts, []refusal{
		{"arpatch patches seal", exitUsage, []string{"seal needs at least one series directory", "patches/sglang/pcie-2026-04"}},
		{"arpatch patches seal dir --dry-run", exitUsage, []string{"flag provided but not defined: -dry-run"}},
		{"arpatch patches seal -- -x", exitUsage, []string{`seal takes directories only, got "-x" (seal has no flags)`}},
	})
}

func TestPortOpts(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	o, err := optsOf(t, portOpts, "arpatch patches port --series pcie-2026-07 --to main")
	if err != nil {
		t.Fatal(err)
	}
	if o.Series.Name != "pcie-2026-07" || o.To != "main" || o.From != "" || o.Repo != "sglang" || o.RepoArg != "sglang" || len(o.Moves) != 0 || o.Out != "" || o.JSON != "" || o.Seal {
		t.Errorf("defaults: %+v", o)
	}
	o, err = optsOf(t, portOpts, "arpatch patches port --series pcie-2026-07 --to v2 --from v1 --repo ~/m.git --out ~/next --json ~/p.json --seal --move a/x.cuh=b/x.cuh --move c=d")
	if err != nil {
		t.Fatal(err)
	}
	if o.To != "v2" || o.From != "v1" || o.Repo != "/home/u/m.git" || o.RepoArg != "~/m.git" || o.Out != "/home/u/next" || o.JSON != "/home/u/p.json" || !o.Seal ||
		!reflect.DeepEqual(o.Moves, map[string]string{"a/x.cuh": "b/x.cuh", "c": "d"}) {
		t.Errorf("flags: %+v", o)
	}
	refuses(t, portOpts, []refusal{
		{"arpatch patches port --to main", exitUsage, []string{`Required flag "series" not set`}},
		{"arpatch patches port --series pcie-2026-07", exitUsage, []string{`Required flag "to" not set`}},
		{"arpatch patches port --series nosuch --to main", exitUsage, []string{"--series", "nosuch"}},
		{"arpatch patches port --series pcie-2026-07 --to main --move a.cuh", exitUsage, []string{`--move "a.cuh": want OLD=NEW`, "e.g. --move sgl-kernel/csrc/x.cuh="}},
		{"arpatch patches port --series pcie-2026-07 --to main --move =b", exitUsage, []string{`--move "=b": want OLD=NEW`}},
		{"arpatch patches port --series pcie-2026-07 --to main --patches-dir nosuch", exitUsage, []string{"--patches-dir nosuch"}},
	})
}

func TestDoctorOpts(t *testing.T) {
	o, err := optsOf(t, doctorOpts, "arpatch doctor")
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
	testrepo.WriteFiles(tree, map[string]string{"python/sglang/srt/server_args.py": string(src)})
	o, err = optsOf(t, doctorOpts, "arpatch doctor --json --python /venv/bin/python --src "+tree+" --server-cmd 'python -m sglang.launch_server --tp 2'")
	if err != nil {
		t.Fatal(err)
	}
	if !o.JSON || o.Inspect.Python != "/venv/bin/python" || o.Inspect.ServerCmd != "python -m sglang.launch_server --tp 2" || o.Inspect.ServerOptions == nil {
		t.Errorf("flags: %+v", o)
	}
	refuses(t, doctorOpts, []refusal{
		{"arpatch doctor --src " + tree, exitUsage, []string{"--src reads a --server-cmd", "pass --server-cmd too, or drop --src"}},
		{"arpatch doctor --src nowhere --server-cmd x", exitUsage, []string{"--src nowhere: open nowhere/python/sglang/srt/server_args.py", "pass the SGLang checkout the server runs from"}},
		{"arpatch doctor --server-cmd ''", exitUsage, []string{"--server-cmd was given an empty value"}},
	})
}
