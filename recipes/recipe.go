// Package recipes defines arpatch's recipes: TOML files that pin an
// upstream SGLang commit, name the patch series to apply, and hold the
// runtime environment, build and bench settings that go with them.
//
// Two recipes ship embedded in the binary: "baseline" (no patches) and
// "pcie" (custom allreduce on PCIe-only GPUs). Both pin
// https://github.com/sgl-project/sglang.git at
// 84118acf50b3a4c74e85e9ff9033792552de1a76 (2026-04-03, sglang-kernel
// 0.4.1), the tree of the published PCIe account. A user's recipe is read
// from a file with the same schema.
//
// The package validates and fills defaults; it does not clone, patch,
// build or bench. What a recipe's values mean to the harness is checked
// there: bench.CheckRecipe runs the pcie series' variables of [env]
// through tune.CheckEnv and loads bench.workload's prompts (bench.RecipeFile
// reads a file with both).
package recipes

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/listspec"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/tomlx"
)

//go:embed *.toml
var embedded embed.FS

// BuiltinWorkload is the bench.workload word for harness/workload's
// built-in prompts (workload.Builtin), the default.
const BuiltinWorkload = "builtin"

// DefaultUpstreamURL is SGLang's upstream repository.
const DefaultUpstreamURL = "https://github.com/sgl-project/sglang.git"

// Recipe is one recipe file, decoded.
type Recipe struct {
	Name        string `toml:"name"`
	Description string `toml:"description"`
	// Series names a patch series family (e.g. "pcie") or one series
	// (e.g. "pcie-2026-04"); empty means no patches.
	Series string `toml:"series"`
	// Skip lists patch files of the series to leave out; arpatch still
	// refuses a selection that breaks a requires pair.
	Skip     []string          `toml:"skip"`
	Upstream Upstream          `toml:"upstream"`
	Env      map[string]string `toml:"env"`
	Build    Build             `toml:"build"`
	Bench    Bench             `toml:"bench"`

	// Source is where the recipe came from: "embedded:pcie" or a path.
	Source string `toml:"-"`
	// SHA256 is the hex sha256 of the recipe file's bytes.
	SHA256 string `toml:"-"`

	data []byte // the file's bytes, for KeyError's line numbers
}

// Upstream pins the SGLang source.
type Upstream struct {
	URL    string `toml:"url"`
	Commit string `toml:"commit"` // 40 hex
}

// Build holds sgl-kernel build settings (used by `arpatch build`).
type Build struct {
	// Archs are CUDA arch names without "sm_", e.g. "120a" for sm_120a.
	Archs []string `toml:"archs"`
	// Jobs is the build parallelism; 0 means one job per CPU core.
	Jobs    int    `toml:"jobs"`
	Offline bool   `toml:"offline"`
	DepsDir string `toml:"deps_dir"`
	// Tool is ToolAuto, ToolUV or ToolPip.
	Tool Tool `toml:"tool"`
}

// Tool is a wheel build frontend arpatch drives, as build.tool and
// --tool spell it.
type Tool string

// The build.tool words.
const (
	ToolAuto Tool = "auto" // uv when it is on PATH, else pip
	ToolUV   Tool = "uv"
	ToolPip  Tool = "pip"
)

// ToolsText is the build.tool words as messages list them: "auto, uv or pip".
var ToolsText = fmt.Sprintf("%s, %s or %s", ToolAuto, ToolUV, ToolPip)

// ValidTool reports whether tool names a wheel build frontend arpatch
// drives: ToolAuto (or "", the same), ToolUV or ToolPip.
func ValidTool(tool Tool) bool {
	switch tool {
	case "", ToolAuto, ToolUV, ToolPip:
		return true
	}
	return false
}

// Bench holds EAGLE-3 benchmark settings (used by `arpatch bench`).
type Bench struct {
	Model                     string `toml:"model"`
	DraftModel                string `toml:"draft_model"`
	TP                        int    `toml:"tp"`
	SpeculativeAlgorithm      string `toml:"speculative_algorithm"`
	SpeculativeNumSteps       int    `toml:"speculative_num_steps"`
	SpeculativeEagleTopK      int    `toml:"speculative_eagle_topk"`
	SpeculativeNumDraftTokens int    `toml:"speculative_num_draft_tokens"`
	// Workload is BuiltinWorkload or a path to a JSONL or ShareGPT JSON
	// file (harness/workload reads it).
	Workload     string `toml:"workload"`
	NumPrompts   int    `toml:"num_prompts"`
	MaxNewTokens int    `toml:"max_new_tokens"`
	// Concurrency lists the levels (requests in flight) each trial runs:
	// concurrency = 4 or concurrency = [1, 4, 16].
	Concurrency Levels `toml:"concurrency"`
	Warmup      int    `toml:"warmup"`
	Trials      int    `toml:"trials"`
	BaselineArm string `toml:"baseline_arm"`
	Arms        []Arm  `toml:"arm"`
}

// Levels is a list of concurrency levels. In TOML it is one integer or an
// array of integers; CheckLevels bounds them.
type Levels []int

// UnmarshalTOML reads an integer or an array of integers. A value that
// does not fit an int is refused here, before any range check.
func (l *Levels) UnmarshalTOML(v any) error {
	one := func(x any) (int, error) {
		n, ok := x.(int64)
		if !ok {
			return 0, fmt.Errorf("%v is not an integer; write concurrency = 4 or concurrency = [1, 4, 16]", x)
		}
		if int64(int(n)) != n {
			return 0, fmt.Errorf("%d is out of range", n)
		}
		return int(n), nil
	}
	switch x := v.(type) {
	case []any:
		*l = nil
		for _, e := range x {
			n, err := one(e)
			if err != nil {
				return err
			}
			*l = append(*l, n)
		}
		return nil
	default:
		n, err := one(x)
		if err != nil {
			return err
		}
		*l = Levels{n}
		return nil
	}
}

// CheckLevels checks concurrency levels: at least one, each within
// bounds.Bench["concurrency"], none twice, in increasing order (the
// order they run in, and the order of every report). The error names
// neither file nor key; the caller adds them.
func CheckLevels(l []int) error {
	if len(l) == 0 {
		return fmt.Errorf("no level: give at least one, e.g. [1, 4, 16]")
	}
	seen := map[int]bool{}
	for i, c := range l {
		if err := bounds.Check("concurrency", int64(c)); err != nil {
			return err
		}
		if seen[c] {
			return fmt.Errorf("%d is listed twice", c)
		}
		seen[c] = true
		if i > 0 && c < l[i-1] {
			return fmt.Errorf("%d after %d: list the levels in increasing order, e.g. 1,4,16 (they run in that order)", c, l[i-1])
		}
	}
	return nil
}

// ParseLevels reads "1,4,16" (a flag's value) into levels (listspec:
// whole numbers, no empty item) and checks them (CheckLevels).
func ParseLevels(s string) ([]int, error) {
	items, err := listspec.Split(s)
	if err != nil {
		return nil, err
	}
	var l []int
	for _, f := range items {
		n, err := listspec.Whole(f)
		if err != nil {
			return nil, fmt.Errorf("%w, e.g. 1,4,16", err)
		}
		if err := bounds.Check("concurrency", n); err != nil {
			return nil, err
		}
		l = append(l, int(n))
	}
	return l, CheckLevels(l)
}

// Arm is one configuration the bench compares: a name, the environment it
// adds and extra server arguments.
type Arm struct {
	Name   string            `toml:"name"`
	Python string            `toml:"python"`
	Env    map[string]string `toml:"env"`
	Args   []string          `toml:"args"`
}

var (
	nameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
	envKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Names lists the embedded recipes.
func Names() []string {
	ents, _ := fs.ReadDir(embedded, ".")
	var n []string
	for _, e := range ents {
		n = append(n, strings.TrimSuffix(e.Name(), ".toml"))
	}
	sort.Strings(n)
	return n
}

// Embedded loads the embedded recipe called name. The error for an unknown
// name lists the known ones; the caller adds how its user names a file
// instead (--recipe-file, --a-file, arms.a_file).
func Embedded(name string) (*Recipe, error) {
	data, err := embedded.ReadFile(name + ".toml")
	if err != nil {
		return nil, fmt.Errorf("no recipe named %q; known recipes: %s", name, strings.Join(Names(), ", "))
	}
	return Parse("embedded:"+name, data)
}

// File loads a user's recipe from path. Its path-valued keys
// (bench.workload, build.deps_dir) are relative to the file's directory,
// made absolute here, and checked: a workload that does not load or a
// deps_dir that is not a directory is an error "path:line: key: ...".
// A file that cannot be read is the *os.PathError, which names no flag:
// the caller names the flag or key that gave path.
func File(path string) (*Recipe, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	return parse(filepath.Clean(path), dir, data)
}

// Parse decodes and validates a recipe and fills its defaults. source names
// it in errors, which take the form "source:line: key: problem". It returns
// an error for a TOML syntax error, an unknown key, a missing name or
// upstream.commit, a commit that is not 40 hex, and any value out of range.
func Parse(source string, data []byte) (*Recipe, error) {
	return parse(source, "", data)
}

// parse is Parse with dir, the directory relative paths in the file are
// relative to ("": the working directory, for an embedded recipe).
func parse(source, dir string, data []byte) (*Recipe, error) {
	var r Recipe
	md, err := toml.Decode(string(data), &r)
	if err != nil {
		return nil, tomlx.DecodeError(source, err)
	}
	if err := tomlx.Strict(source, data, md); err != nil {
		return nil, err
	}
	r.Source = source
	r.SHA256 = digest.SHA256Hex(data)
	r.data = data
	if err := r.validate(md); err != nil {
		return nil, err
	}
	if err := r.checkPaths(dir); err != nil {
		return nil, err
	}
	r.fillDefaults(md)
	return &r, nil
}

// checkPaths makes the path-valued keys (bench.workload unless
// BuiltinWorkload, build.deps_dir) relative to dir and checks that the
// deps directory exists (bench.CheckRecipe loads the prompts).
func (r *Recipe) checkPaths(dir string) error {
	rel := func(p string) string {
		if dir == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if w := r.Bench.Workload; w != "" && w != BuiltinWorkload {
		r.Bench.Workload = rel(w)
	}
	if d := r.Build.DepsDir; d != "" {
		r.Build.DepsDir = rel(d)
		if fi, err := os.Stat(r.Build.DepsDir); err != nil || !fi.IsDir() {
			return r.fail("build.deps_dir", "%s is not a directory (a relative path is relative to the recipe's directory); create it (mkdir -p %s), or remove the key", r.Build.DepsDir, shellq.Quote(r.Build.DepsDir))
		}
	}
	return nil
}

// KeyError is err about key (a dotted TOML key, e.g. "env.NAME") as
// "source:line: key: err", or "source: key: err" when the key is not in
// the file, for the checks of a recipe made outside this package.
func (r *Recipe) KeyError(key string, err error) error {
	line := tomlx.Line(r.data, key)
	loc := fmt.Sprintf("%s:%d", r.Source, line)
	if line == 0 {
		loc = r.Source
	}
	return fmt.Errorf("%s: %s: %w", loc, key, err)
}

// fail is KeyError with a formatted problem.
func (r *Recipe) fail(key, format string, args ...any) error {
	return r.KeyError(key, fmt.Errorf(format, args...))
}

// validate checks the recipe decoded with md, returning the first problem
// as a KeyError: its name and upstream, the bounds of its bench counts,
// its build, then the rest of its bench.
func (r *Recipe) validate(md toml.MetaData) error {
	if err := r.validateHead(md); err != nil {
		return err
	}
	if err := r.validateBounds(md); err != nil {
		return err
	}
	if err := r.validateBuild(); err != nil {
		return err
	}
	return r.validateBench()
}

// validateHead checks the recipe's name, its upstream (a table with a
// full commit; a url, when given, not empty), skip (only with a series)
// and its env's names.
func (r *Recipe) validateHead(md toml.MetaData) error {
	fail := r.fail
	if r.Name == "" {
		return fail("name", "missing; every recipe has a name")
	}
	if !nameRe.MatchString(r.Name) {
		return fail("name", "%q: use lower case letters, digits, '_', '.' and '-'", r.Name)
	}
	if !md.IsDefined("upstream") {
		return fail("upstream", "missing table [upstream] with url and commit")
	}
	if r.Upstream.Commit == "" {
		return fail("upstream.commit", "missing; pin a full 40-hex commit")
	}
	if _, err := githash.Parse(r.Upstream.Commit); err != nil {
		return fail("upstream.commit", "%v", err)
	}
	if r.Series == "" && len(r.Skip) > 0 {
		return fail("skip", "names patches but the recipe has no series")
	}
	for k := range r.Env {
		if !envKeyRe.MatchString(k) {
			return fail("env."+k, "%q is not a valid environment variable name", k)
		}
	}
	if md.IsDefined("upstream", "url") && strings.TrimSpace(r.Upstream.URL) == "" {
		return fail("upstream.url", "is empty; remove the key to use %s, or name a repository", DefaultUpstreamURL)
	}
	return nil
}

// validateBounds checks each bench count the file gives against package
// bounds (a huge one would reach an allocation or a loop that never ends),
// and the concurrency levels (CheckLevels).
func (r *Recipe) validateBounds(md toml.MetaData) error {
	fail := r.fail
	for _, k := range []string{"tp", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "num_prompts", "max_new_tokens", "warmup", "trials"} {
		if md.IsDefined("bench", k) {
			if err := bounds.Check(k, int64(intField(&r.Bench, k))); err != nil {
				return fail("bench."+k, "%v (remove the key for the default)", err)
			}
		}
	}
	if md.IsDefined("bench", "concurrency") {
		if err := CheckLevels(r.Bench.Concurrency); err != nil {
			return fail("bench.concurrency", "%v", err)
		}
	}
	return nil
}

// validateBuild checks [build]: each arch a known CUDA arch, written
// without sm_; jobs within bounds; a known tool.
func (r *Recipe) validateBuild() error {
	fail := r.fail
	for _, a := range r.Build.Archs {
		switch c, ok := cudaarch.Canonical(a); {
		case ok && string(c) != a:
			return fail("build.archs", "%q is not a known CUDA arch name; write %q (without sm_)", a, c)
		case !ok:
			return fail("build.archs", "%q is not a known CUDA arch; write it without sm_, e.g. \"120a\" (known: %s)", a, strings.Join(cudaarch.Strings(cudaarch.Known()), ", "))
		}
	}
	if err := bounds.Check("jobs", int64(r.Build.Jobs)); err != nil {
		return fail("build.jobs", "%v (0 is one per core)", err)
	}
	if !ValidTool(r.Build.Tool) {
		return fail("build.tool", "%q: use %q, %q or %q", r.Build.Tool, ToolAuto, ToolUV, ToolPip)
	}
	return nil
}

// validateBench checks [bench]: the speculative algorithm, no negative
// count, each arm's name (valid, once) and env names, and a baseline_arm
// that names an arm.
func (r *Recipe) validateBench() error {
	fail := r.fail
	b := r.Bench
	if err := CheckSpecAlgorithm(b.SpeculativeAlgorithm); err != nil {
		return fail("bench.speculative_algorithm", "%v", err)
	}
	for _, f := range []struct {
		key string
		v   int
	}{
		{"bench.tp", b.TP}, {"bench.speculative_num_steps", b.SpeculativeNumSteps},
		{"bench.speculative_eagle_topk", b.SpeculativeEagleTopK}, {"bench.speculative_num_draft_tokens", b.SpeculativeNumDraftTokens},
		{"bench.num_prompts", b.NumPrompts}, {"bench.max_new_tokens", b.MaxNewTokens},
		{"bench.warmup", b.Warmup}, {"bench.trials", b.Trials},
	} {
		if f.v < 0 {
			return fail(f.key, "%d: must not be negative", f.v)
		}
	}
	names := map[string]bool{}
	for _, a := range b.Arms {
		if !nameRe.MatchString(a.Name) {
			return fail("bench.arm.name", "%q: every arm needs a name of lower case letters, digits, '_', '.' and '-'", a.Name)
		}
		if names[a.Name] {
			return fail("bench.arm.name", "%q is defined twice", a.Name)
		}
		names[a.Name] = true
		for k := range a.Env {
			if !envKeyRe.MatchString(k) {
				return fail("bench.arm.env", "arm %s: %q is not a valid environment variable name", a.Name, k)
			}
		}
	}
	if b.BaselineArm != "" && len(b.Arms) > 0 && !names[b.BaselineArm] {
		return fail("bench.baseline_arm", "%q names no [[bench.arm]]", b.BaselineArm)
	}
	return nil
}

// intField returns the Bench field whose TOML key is key.
func intField(b *Bench, key string) int {
	switch key {
	case "tp":
		return b.TP
	case "speculative_num_steps":
		return b.SpeculativeNumSteps
	case "speculative_eagle_topk":
		return b.SpeculativeEagleTopK
	case "speculative_num_draft_tokens":
		return b.SpeculativeNumDraftTokens
	case "num_prompts":
		return b.NumPrompts
	case "max_new_tokens":
		return b.MaxNewTokens
	case "warmup":
		return b.Warmup
	case "trials":
		return b.Trials
	}
	return 0
}

// The defaults of a recipe's [bench] counts: the one place each lives.
// bench.Options (Resolved), nightly.toml's [bench] and the flags of
// `arpatch bench` (their --help defaults) read them from here.
const (
	DefaultTP              = 8   // tensor parallel size (world size)
	DefaultSpecSteps       = 3   // speculative_num_steps
	DefaultSpecTopK        = 1   // speculative_eagle_topk
	DefaultSpecDraftTokens = 4   // speculative_num_draft_tokens
	DefaultNumPrompts      = 32  // prompts per trial: the built-in workload's size
	DefaultMaxNewTokens    = 256 // tokens generated per request
	DefaultConcurrency     = 1   // one level, requests in flight: single-stream tok/s
	DefaultTrials          = 5   // trials per arm
	DefaultWarmup          = 2   // untimed requests after each server start
)

// fillDefaults fills what the file leaves out. Zero is "unset" for the
// fields where zero means nothing; bench.warmup = 0 (no warm-up) is kept,
// so it is filled only when the file does not define it.
func (r *Recipe) fillDefaults(md toml.MetaData) {
	if r.Upstream.URL == "" {
		r.Upstream.URL = DefaultUpstreamURL
	}
	if len(r.Build.Archs) == 0 {
		r.Build.Archs = []string{"120a"}
	}
	if r.Build.Tool == "" {
		r.Build.Tool = ToolAuto
	}
	b := &r.Bench
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setInt(&b.TP, DefaultTP)
	setInt(&b.SpeculativeNumSteps, DefaultSpecSteps)
	setInt(&b.SpeculativeEagleTopK, DefaultSpecTopK)
	setInt(&b.SpeculativeNumDraftTokens, DefaultSpecDraftTokens)
	setInt(&b.NumPrompts, DefaultNumPrompts)
	setInt(&b.MaxNewTokens, DefaultMaxNewTokens)
	if len(b.Concurrency) == 0 {
		b.Concurrency = Levels{DefaultConcurrency}
	}
	setInt(&b.Trials, DefaultTrials)
	if !md.IsDefined("bench", "warmup") {
		b.Warmup = DefaultWarmup
	}
	if b.SpeculativeAlgorithm == "" {
		b.SpeculativeAlgorithm = "EAGLE3"
	}
	if b.Workload == "" {
		b.Workload = BuiltinWorkload
	}
	if b.BaselineArm == "" {
		b.BaselineArm = "baseline"
	}
}

// Encode writes the resolved recipe as TOML, defaults filled in.
func (r *Recipe) Encode() ([]byte, error) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# source: %s\n# sha256: %s\n", r.Source, r.SHA256)
	if err := toml.NewEncoder(&sb).Encode(r); err != nil {
		return nil, err
	}
	return []byte(sb.String()), nil
}

// ValidName reports whether s is a valid recipe or arm name: lower case
// letters, digits, '_', '.' and '-', starting with a letter or digit.
func ValidName(s string) bool { return nameRe.MatchString(s) }

// ValidEnvName reports whether s is an environment variable name arpatch
// accepts: letters, digits and '_', not starting with a digit.
func ValidEnvName(s string) bool { return envKeyRe.MatchString(s) }

// CheckSpecAlgorithm refuses a speculative algorithm SGLang does not
// know, for a recipe and the --speculative-algorithm flag alike: "" and
// "none" (no speculation), EAGLE3, EAGLE, NEXTN, STANDALONE, NGRAM.
func CheckSpecAlgorithm(a string) error {
	switch a {
	case "", "none", "EAGLE3", "EAGLE", "NEXTN", "STANDALONE", "NGRAM":
		return nil
	}
	return fmt.Errorf("%q: use EAGLE3 for an EAGLE-3 draft model (or EAGLE, NEXTN, STANDALONE, NGRAM; none for no speculation)", a)
}
