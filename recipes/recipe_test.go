package recipes

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEmbeddedRecipes(t *testing.T) {
	if got := strings.Join(Names(), ","); got != "baseline,pcie" {
		t.Fatalf("Names() = %s", got)
	}
	for _, n := range Names() {
		r, err := Embedded(n)
		if err != nil {
			t.Fatal(err)
		}
		if r.Upstream.URL != DefaultUpstreamURL || r.Upstream.Commit != "84118acf50b3a4c74e85e9ff9033792552de1a76" {
			t.Errorf("%s pins %s at %s", n, r.Upstream.URL, r.Upstream.Commit)
		}
		if r.Source != "embedded:"+n || len(r.SHA256) != 64 {
			t.Errorf("%s: source %q sha %q", n, r.Source, r.SHA256)
		}
		if r.Build.Archs[0] != "120a" || r.Bench.TP != 8 || r.Bench.SpeculativeAlgorithm != "EAGLE3" {
			t.Errorf("%s: build %+v bench tp %d algo %s", n, r.Build, r.Bench.TP, r.Bench.SpeculativeAlgorithm)
		}
	}
	p, _ := Embedded("pcie")
	b, _ := Embedded("baseline")
	if p.Series != "pcie" || p.Env["SGLANG_FORCE_CUSTOM_AR_PCIE"] != "1" || len(p.Env) != 1 {
		t.Errorf("pcie: series %q env %v", p.Series, p.Env)
	}
	if b.Series != "" || len(b.Env) != 0 {
		t.Errorf("baseline: series %q env %v, want no patches and no env", b.Series, b.Env)
	}
	if _, err := Embedded("nope"); err == nil || !strings.Contains(err.Error(), "known recipes: baseline, pcie") {
		t.Errorf("unknown recipe: %v", err)
	}
}

// concurrency is one level or a list, and either reads back from
// 'recipes show' output.
func TestConcurrencyLevels(t *testing.T) {
	pin := "[upstream]\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n"
	for in, want := range map[string][]int{"4": {4}, "[1, 4, 16]": {1, 4, 16}} {
		r, err := Parse("r.toml", []byte("name = \"r\"\n"+pin+"[bench]\nconcurrency = "+in+"\n"))
		if err != nil || !slices.Equal(r.Bench.Concurrency, want) {
			t.Fatalf("concurrency = %s: %v %v", in, r.Bench.Concurrency, err)
		}
		out, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse("back.toml", out)
		if err != nil || !slices.Equal(back.Bench.Concurrency, want) {
			t.Errorf("round trip of %s: %v %v\n%s", in, back, err, out)
		}
	}
	if l, err := ParseLevels("1, 4,16"); err != nil || !slices.Equal(l, []int{1, 4, 16}) {
		t.Errorf("ParseLevels: %v %v", l, err)
	}
	for in, want := range map[string]string{"1,x": `"x" is not a whole number (digits only), e.g. 1,4,16`, "0": "0: use 1 to 4096", "4097": "4097: use 1 to 4096",
		"1,1": "1 is listed twice", "": "no level", "1,,4": "item 2 of 3 is empty", "1.5": `"1.5" is not a whole number`, "+4": `"+4" is not`, "4,1": "list the levels in increasing order"} {
		if _, err := ParseLevels(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLevels(%q) = %v, want %q", in, err, want)
		}
	}
}

func TestDefaultsAndEncodeRoundTrip(t *testing.T) {
	r, err := Parse("min.toml", []byte("name = \"min\"\n[upstream]\ncommit = \"8905cbd42f4a27dbecad6487cd3904278756fef8\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Upstream.URL != DefaultUpstreamURL || r.Build.Tool != "auto" || r.Bench.Trials != 5 || !slices.Equal(r.Bench.Concurrency, []int{1}) ||
		r.Bench.SpeculativeNumDraftTokens != 4 || r.Bench.MaxNewTokens != 256 || r.Bench.BaselineArm != "baseline" {
		t.Errorf("defaults not filled: %+v", r)
	}
	out, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("encoded", []byte(out))
	if err != nil {
		t.Fatalf("encoded recipe does not parse: %v\n%s", err, out)
	}
	if back.Upstream != r.Upstream || back.Bench.Trials != r.Bench.Trials || back.Build.Archs[0] != "120a" {
		t.Errorf("round trip changed the recipe: %+v", back)
	}
	// bench.warmup: 2 when left out, and 0 kept when given (no warm-up).
	zero, err := Parse("w0.toml", []byte("name = \"w0\"\n[upstream]\ncommit = \"8905cbd42f4a27dbecad6487cd3904278756fef8\"\n[bench]\nwarmup = 0\n"))
	if err != nil || r.Bench.Warmup != 2 || zero.Bench.Warmup != 0 {
		t.Errorf("warmup: default %d, given 0 -> %d (%v)", r.Bench.Warmup, zero.Bench.Warmup, err)
	}
}

func TestValidationNamesFileLineAndKey(t *testing.T) {
	const pin = "[upstream]\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n"
	for _, tc := range []struct {
		name, toml, want string
	}{
		{"no name", pin, "r.toml: name: missing"},
		{"bad name", "name = \"My Recipe\"\n" + pin, `r.toml:1: name: "My Recipe"`},
		{"short commit", "name = \"r\"\n[upstream]\ncommit = \"84118acf\"\n", `r.toml:3: upstream.commit: "84118acf" is not a full 40-hex commit hash: it has 8 hex digits, not 40`},
		{"upper-case commit", "name = \"r\"\n[upstream]\ncommit = \"84118ACF50B3A4C74E85E9FF9033792552DE1A76\"\n", "upstream.commit"},
		{"no commit", "name = \"r\"\n[upstream]\nurl = \"x\"\n", "r.toml:2: upstream.commit: missing"},
		{"unknown key", "name = \"r\"\n" + pin + "[build]\narch = [\"120a\"]\n", `r.toml:5: unknown key "build.arch"`},
		{"bad arch", "name = \"r\"\n" + pin + "[build]\narchs = [\"sm_120a\"]\n", `r.toml:5: build.archs: "sm_120a" is not a known CUDA arch name; write "120a" (without sm_)`},
		{"unknown arch", "name = \"r\"\n" + pin + "[build]\narchs = [\"80a\"]\n", `r.toml:5: build.archs: "80a" is not a known CUDA arch; write it without sm_, e.g. "120a" (known: 75, 80, 86,`},
		{"bad tool", "name = \"r\"\n" + pin + "[build]\ntool = \"make\"\n", "build.tool"},
		{"bad tp", "name = \"r\"\n" + pin + "[bench]\ntp = 3\n", "r.toml:5: bench.tp: 3: custom allreduce supports world sizes 2, 4, 6 and 8"},
		{"bad algo", "name = \"r\"\n" + pin + "[bench]\nspeculative_algorithm = \"eagle3\"\n", "use EAGLE3"},
		{"bad env", "name = \"r\"\n" + pin + "[env]\n\"A-B\" = \"1\"\n", `"A-B" is not a valid environment variable name`},
		{"skip without series", "name = \"r\"\nskip = [\"0001-x.patch\"]\n" + pin, "skip: names patches but the recipe has no series"},
		{"arm twice", "name = \"r\"\n" + pin + "[[bench.arm]]\nname = \"a\"\n[[bench.arm]]\nname = \"a\"\n", `"a" is defined twice`},
		{"baseline arm missing", "name = \"r\"\n" + pin + "[bench]\nbaseline_arm = \"zz\"\n[[bench.arm]]\nname = \"a\"\n", `"zz" names no [[bench.arm]]`},
		{"wrong type", "name = \"r\"\n" + pin + "[bench]\ntp = \"8\"\n", "r.toml:5: bench.tp: incompatible types"},
		{"no upstream", "name = \"r\"\n", "missing table [upstream]"},
		{"zero trials", "name = \"r\"\n" + pin + "[bench]\ntrials = 0\n", "r.toml:5: bench.trials: 0: use 1 to 1000"},
		// Every count is bounded: the largest int64 used to panic in makeslice.
		{"huge num_prompts", "name = \"r\"\n" + pin + "[bench]\nnum_prompts = 9223372036854775807\n", "r.toml:5: bench.num_prompts: 9223372036854775807: use 1 to 100000 (remove the key for the default)"},
		{"huge max_new_tokens", "name = \"r\"\n" + pin + "[bench]\nmax_new_tokens = 9223372036854775807\n", "bench.max_new_tokens: 9223372036854775807: use 1 to 1048576"},
		{"huge warmup", "name = \"r\"\n" + pin + "[bench]\nwarmup = 9223372036854775807\n", "bench.warmup: 9223372036854775807: use 0 to 10000"},
		{"huge trials", "name = \"r\"\n" + pin + "[bench]\ntrials = 100000\n", "bench.trials: 100000: use 1 to 1000"},
		{"huge draft tokens", "name = \"r\"\n" + pin + "[bench]\nspeculative_num_draft_tokens = 9223372036854775807\n", "bench.speculative_num_draft_tokens: 9223372036854775807: use 1 to 1024"},
		{"huge concurrency", "name = \"r\"\n" + pin + "[bench]\nconcurrency = [1, 9223372036854775807]\n", "r.toml:5: bench.concurrency: 9223372036854775807: use 1 to 4096"},
		{"huge jobs", "name = \"r\"\n" + pin + "[build]\njobs = 9223372036854775807\n", "r.toml:5: build.jobs: 9223372036854775807: use 0 to 4096 (0 is one per core)"},
		{"unknown tool", "name = \"r\"\n" + pin + "[build]\ntool = \"conda\"\n", `r.toml:5: build.tool: "conda": use "auto", "uv" or "pip"`},
		{"level twice", "name = \"r\"\n" + pin + "[bench]\nconcurrency = [4, 4]\n", "bench.concurrency: 4 is listed twice"},
		{"levels out of order", "name = \"r\"\n" + pin + "[bench]\nconcurrency = [4, 1]\n", "bench.concurrency: 1 after 4: list the levels in increasing order"},
		{"no level", "name = \"r\"\n" + pin + "[bench]\nconcurrency = []\n", "bench.concurrency: no level"},
		{"level not int", "name = \"r\"\n" + pin + "[bench]\nconcurrency = [\"4\"]\n", "is not an integer; write concurrency = 4 or concurrency = [1, 4, 16]"},
		{"empty url", "name = \"r\"\n[upstream]\nurl = \"\"\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n", "upstream.url: is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("r.toml", []byte(tc.toml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestFilePaths: a recipe file's path-valued keys (bench.workload,
// build.deps_dir) are relative to the file's directory, not the working
// directory, and a deps_dir that is not a directory is refused when the
// file is read: an error names file, line and key, and no flag
// (harness/bench's TestRecipeFile loads the workload's prompts).
func TestFilePaths(t *testing.T) {
	const pin = "name = \"r\"\n[upstream]\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n"
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(filepath.Join(sub, "deps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "p.jsonl"), []byte(`{"prompt": "hi"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(body string) string {
		p := filepath.Join(sub, "r.toml")
		if err := os.WriteFile(p, []byte(pin+body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The working directory is not the recipe's: the paths resolve anyway.
	t.Chdir(dir)
	r, err := File(write("[build]\ndeps_dir = \"deps\"\n[bench]\nworkload = \"p.jsonl\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Bench.Workload != filepath.Join(sub, "p.jsonl") || r.Build.DepsDir != filepath.Join(sub, "deps") {
		t.Errorf("workload %q, deps_dir %q: want them under %s", r.Bench.Workload, r.Build.DepsDir, sub)
	}
	if r, err := File(write("[bench]\nworkload = \"builtin\"\n")); err != nil || r.Bench.Workload != "builtin" {
		t.Errorf("builtin: %+v, %v", r, err)
	}
	for body, want := range map[string]string{
		"[build]\ndeps_dir = \"nodeps\"\n": "sub/r.toml:5: build.deps_dir: " + filepath.Join(sub, "nodeps") + " is not a directory (a relative path is relative to the recipe's directory); create it (mkdir -p " + filepath.Join(sub, "nodeps") + "), or remove the key",
	} {
		if err := os.WriteFile(filepath.Join(sub, "r.toml"), []byte(pin+body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := File("sub/r.toml"); err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", body, err, want)
		}
	}
	// A file that is not there: the path error, naming no flag.
	if _, err := File(filepath.Join(dir, "none.toml")); err == nil || strings.Contains(err.Error(), "--") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
