// Package nightly runs arpatch's nightly job: does the patch series still
// apply to upstream SGLang (drift), did the patched build get slower than
// its recent history, and is it still faster than the baseline? It fetches
// the tracked ref, checks every series, builds both arms through the build
// cache, benches them, stores everything in the history database, decides
// regressions with a Mann-Whitney U test and a relative threshold, and
// writes reports for CI.
package nightly

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/statedir"
	"github.com/arpatch/arpatch/internal/tomlx"
	"github.com/arpatch/arpatch/recipes"
)

// Config is nightly.toml. Every field has a default (see Defaults).
type Config struct {
	Upstream   Upstream   `toml:"upstream"`
	Arms       Arms       `toml:"arms"`
	Build      Build      `toml:"build"`
	Bench      Bench      `toml:"bench"`
	History    History    `toml:"history"`
	Regression Regression `toml:"regression"`
	Outputs    Outputs    `toml:"outputs"`

	// Dir is the config file's directory: relative paths are relative to it.
	Dir string `toml:"-"`
	// path and data are the file LoadConfig read, for errors found later
	// that name a key's line (At).
	path string
	data []byte
}

// Upstream names what to track.
type Upstream struct {
	// Repo is the local repository (a mirror or a checkout) that holds
	// upstream's history; the nightly fetches into it and reads from it.
	Repo string `toml:"repo"`
	// Fetch updates Repo from its origin remote before the checks; leave
	// it false for a mirror kept current by other means.
	Fetch bool   `toml:"fetch"`
	Ref   string `toml:"ref"` // the ref to track, e.g. "main"
	// Also lists more revisions to check for drift each night (e.g. the
	// other pinned commits); they do not fail the run.
	Also []string `toml:"also_check"`
}

// Arms names the recipes of arm A (the reference) and arm B (the patch).
type Arms struct {
	A          string `toml:"a"` // embedded recipe name
	B          string `toml:"b"`
	AFile      string `toml:"a_file"` // or a recipe file
	BFile      string `toml:"b_file"`
	PatchesDir string `toml:"patches_dir"`
	// Commit is CommitPinned or CommitHead, for the build and the bench.
	Commit ArmsCommit `toml:"commit"`
}

// ArmsCommit is the SGLang commit the arms are built and benched at:
// arms.commit in nightly.toml, the word itself.
type ArmsCommit string

// The arms.commit words.
const (
	CommitPinned ArmsCommit = "pinned" // the recipes' commit
	CommitHead   ArmsCommit = "head"   // the tracked ref's head
)

// Build holds build options.
type Build struct {
	Archs    []string     `toml:"archs"`
	Jobs     int          `toml:"jobs"`
	Tool     recipes.Tool `toml:"tool"`
	Offline  bool         `toml:"offline"`
	DepsDir  string       `toml:"deps_dir"`
	Python   string       `toml:"python"`
	CacheDir string       `toml:"cache_dir"`
	WorkDir  string       `toml:"work_dir"` // where the A/B checkouts live
}

// Bench holds bench options; unset ones come from recipe B's [bench].
type Bench struct {
	Model          string         `toml:"model"`
	DraftModel     string         `toml:"draft_model"`
	LaunchCmd      string         `toml:"launch_cmd"`   // for both arms, e.g. a wrapper that installs the arm's wheel
	LaunchCmdA     string         `toml:"launch_cmd_a"` // per arm
	LaunchCmdB     string         `toml:"launch_cmd_b"`
	URLA           string         `toml:"url_a"`
	URLB           string         `toml:"url_b"`
	PythonA        string         `toml:"python_a"`
	PythonB        string         `toml:"python_b"`
	Trials         int            `toml:"trials"`
	NumPrompts     int            `toml:"num_prompts"`
	MaxNewTokens   int            `toml:"max_new_tokens"`
	Concurrency    recipes.Levels `toml:"concurrency"` // one level or a list, e.g. [1, 4, 16]
	Warmup         int            `toml:"warmup"`
	AgreeThreshold float64        `toml:"agree_threshold"`
	ReadyTimeout   string         `toml:"ready_timeout"`
	LogDir         string         `toml:"log_dir"`
	// Tune is a thresholds file from `arpatch tune allreduce`, set in the
	// arms that open the PCIe gate; one made on another host is refused
	// unless ForceTune.
	Tune      string `toml:"tune"`
	ForceTune bool   `toml:"force_tune"`

	warmupSet, agreeSet bool // the file gave them, so 0 means 0
}

// History says where runs are kept.
type History struct {
	// Path is the SQLite file, or the postgres:// URL of a history
	// shared by a fleet (history.Open).
	Path string `toml:"path"`
	// Keep is the local SQLite history where a nightly keeps its run
	// when Path is a URL whose server it cannot reach or write; the next
	// nightly that reaches the server sends the kept runs there (default
	// STATE/nightly/KEY/kept.db).
	Keep        string `toml:"keep"`
	Window      int    `toml:"window"`       // complete runs compared against
	HardwareKey string `toml:"hardware_key"` // default: GPU model x count from nvidia-smi
}

// Regression is the policy.
type Regression struct {
	// ThresholdPct is the relative change that counts, in percent (3).
	ThresholdPct float64 `toml:"threshold_pct"`
	// Metrics maps metric names (stats.Table) to their own thresholds in
	// percent; the metrics judged are these keys (default: tok_s at
	// ThresholdPct).
	Metrics map[string]float64 `toml:"metrics"`
	// Alpha is the Mann-Whitney U significance level (stats.DefaultAlpha,
	// 0.05).
	Alpha float64 `toml:"alpha"`
	// RequireBFaster makes B significantly slower than A tonight a
	// regression (true).
	RequireBFaster *bool `toml:"require_b_faster"`
}

// Outputs lists report files; empty means none.
type Outputs struct {
	Dir             string `toml:"dir"`              // JSON report and markdown summary
	GitHubBenchmark string `toml:"github_benchmark"` // prefix: <prefix>-bigger.json, <prefix>-smaller.json
	Bencher         string `toml:"bencher"`
	JUnit           string `toml:"junit"`
	Plot            string `toml:"plot"` // .svg or .png of tok_s over time
}

// Defaults fills every unset field; a zero value counts as unset.
// LoadConfig fills only the keys the file leaves out, so a file can set
// bench.warmup = 0 or regression.threshold_pct = 0.
func (c *Config) Defaults() { c.defaults(func(string) bool { return false }) }

func (c *Config) defaults(set func(key string) bool) {
	if c.Upstream.Ref == "" {
		c.Upstream.Ref = "main"
	}
	if c.Upstream.Repo == "" {
		c.Upstream.Repo = "sglang.git"
	}
	if c.Arms.A == "" && c.Arms.AFile == "" {
		c.Arms.A = "baseline"
	}
	if c.Arms.B == "" && c.Arms.BFile == "" {
		c.Arms.B = "pcie"
	}
	if c.Arms.Commit == "" {
		c.Arms.Commit = CommitPinned
	}
	c.Build.Python = pyenv.Or(c.Build.Python)
	// bench.trials and bench.warmup, when unset, come from recipe B's
	// [bench], else recipes.DefaultTrials and DefaultWarmup (see
	// TrialsFor and WarmupFor).
	c.Bench.warmupSet = c.Bench.warmupSet || set("bench.warmup")
	c.Bench.agreeSet = c.Bench.agreeSet || set("bench.agree_threshold")
	if c.Bench.AgreeThreshold == 0 && !c.Bench.agreeSet {
		c.Bench.AgreeThreshold = bench.DefaultAgreeThreshold
	}
	if c.History.Window == 0 {
		c.History.Window = 7
	}
	if c.Regression.ThresholdPct == 0 && !set("regression.threshold_pct") {
		c.Regression.ThresholdPct = 3
	}
	if len(c.Regression.Metrics) == 0 {
		c.Regression.Metrics = map[string]float64{stats.TokS: c.Regression.ThresholdPct}
	}
	if c.Regression.Alpha == 0 {
		c.Regression.Alpha = stats.DefaultAlpha
	}
	if c.Regression.RequireBFaster == nil {
		t := true
		c.Regression.RequireBFaster = &t
	}
}

// stateDefaults puts the working files nightly.toml does not name under
// the state directory (internal/statedir), so that nothing lands beside
// the config or in the current directory unasked: build.work_dir is
// STATE/nightly/KEY/work, bench.log_dir its logs/, outputs.dir
// STATE/nightly/KEY/out, history.keep STATE/nightly/KEY/kept.db when
// history.path is a postgres:// URL, and history.path STATE/history.db, the one
// `arpatch history` reads by default (runs are compared by hardware key,
// workload and arm, so nightlies of several configs can share it). KEY
// (ConfigKey) keeps two configs' checkouts and outputs apart. Paths the
// config names stay relative to it.
func (c *Config) stateDefaults(path string) error {
	if c.Build.WorkDir != "" && c.Bench.LogDir != "" && c.History.Path != "" && c.Outputs.Dir != "" && (c.History.Keep != "" || !history.IsURL(c.History.Path)) {
		return nil
	}
	dir, err := statedir.Dir()
	if err != nil {
		return fmt.Errorf("%s: %w (or name build.work_dir, bench.log_dir, history.path, history.keep and outputs.dir in it)", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	base := filepath.Join(dir, "nightly", ConfigKey(abs))
	if c.Build.WorkDir == "" {
		c.Build.WorkDir = filepath.Join(base, "work")
	}
	if c.Bench.LogDir == "" {
		c.Bench.LogDir = filepath.Join(c.Path(c.Build.WorkDir), "logs")
	}
	if c.History.Path == "" {
		c.History.Path = DefaultHistoryPath(dir)
	}
	if c.Outputs.Dir == "" {
		c.Outputs.Dir = filepath.Join(base, "out")
	}
	if c.History.Keep == "" && history.IsURL(c.History.Path) {
		c.History.Keep = filepath.Join(base, "kept.db")
	}
	return nil
}

// DefaultHistoryPath is the history database a nightly writes and
// `arpatch history` reads when neither is told: history.db in the state
// directory dir.
func DefaultHistoryPath(dir string) string { return filepath.Join(dir, "history.db") }

// ConfigKey names a config's own directory under STATE/nightly: its
// directory's name (for people) and the first 12 hex of the sha256 of
// its absolute path (so two configs never share one).
func ConfigKey(absPath string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, filepath.Base(filepath.Dir(absPath)))
	name = strings.TrimLeft(name, ".")
	if name == "" {
		name = "nightly"
	}
	return name + "-" + digest.Short(digest.SHA256Hex([]byte(absPath)))
}

// TrialsFor is bench.trials, else recipe B's (recipe), else
// recipes.DefaultTrials.
func (b Bench) TrialsFor(recipe int) int {
	switch {
	case b.Trials > 0:
		return b.Trials
	case recipe > 0:
		return recipe
	}
	return recipes.DefaultTrials
}

// WarmupFor is bench.warmup when the file sets it (0 included), else
// recipe B's (recipe; a parsed recipe always has one, 2 by default).
func (b Bench) WarmupFor(recipe int) int {
	if b.warmupSet || b.Warmup > 0 {
		return b.Warmup
	}
	return recipe
}

// Path resolves p against the config's directory; a postgres:// URL
// (history.path) stays as it is.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) || history.IsURL(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// ReadyTimeout parses bench.ready_timeout; 0 when it is unset, which
// bench.Options.Resolved turns into server.DefaultReadyTimeout.
func (c *Config) ReadyTimeout() time.Duration {
	d, err := time.ParseDuration(c.Bench.ReadyTimeout)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// At names key where the config gives it: "FILE:LINE: key" as LoadConfig's
// errors do, "FILE: key" when the file does not spell the key out, or the
// key alone for a config built in code.
func (c *Config) At(key string) string {
	if c.path == "" {
		return key
	}
	if line := tomlx.Line(c.data, key); line > 0 {
		return fmt.Sprintf("%s:%d: %s", c.path, line, key)
	}
	return c.path + ": " + key
}

// LoadConfig reads nightly.toml strictly (an unknown key is an error
// naming file, line and key), checks the values (checkNumbers,
// checkNames) and fills defaults.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var c Config
	md, err := toml.Decode(string(data), &c)
	if err != nil {
		return nil, tomlx.DecodeError(path, err)
	}
	if err := tomlx.Strict(path, data, md); err != nil {
		return nil, err
	}
	abs, _ := filepath.Abs(filepath.Dir(path))
	c.Dir, c.path, c.data = abs, path, data
	set := func(key string) bool { return md.IsDefined(strings.Split(key, ".")...) }
	fail := func(key, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s: %s", path, tomlx.Line(data, key), key, fmt.Sprintf(format, args...))
	}
	switch c.Arms.Commit {
	case "", CommitPinned, CommitHead:
	default:
		return nil, fail("arms.commit", "%q: use %q or %q", c.Arms.Commit, CommitPinned, CommitHead)
	}
	if err := c.checkNumbers(set, fail); err != nil {
		return nil, err
	}
	if err := c.checkNames(set, fail); err != nil {
		return nil, err
	}
	// An interpreter given as a path (venv/bin/python3) is relative to
	// the config, like every other path; a bare name is looked up on PATH.
	for _, py := range []*string{&c.Build.Python, &c.Bench.PythonA, &c.Bench.PythonB} {
		if strings.Contains(*py, "/") {
			*py = c.Path(*py)
		}
	}
	c.defaults(set)
	if err := c.stateDefaults(path); err != nil {
		return nil, err
	}
	return &c, nil
}

// failFunc makes LoadConfig's error for key: "FILE:LINE: key: message".
type failFunc func(key, format string, args ...any) error

// checkNumbers checks every number the file sets against its range:
// the regression thresholds and alpha, bench.ready_timeout, history.window,
// build.jobs and the bench's counts, levels and agreement threshold (set
// says whether the file sets a key). Every real number is finite and in
// its range (package bounds): a NaN compares false with every limit, and
// would pass "v < 0".
func (c *Config) checkNumbers(set func(string) bool, fail failFunc) error {
	if err := bounds.CheckFloat("threshold_pct", c.Regression.ThresholdPct); err != nil {
		return fail("regression.threshold_pct", "%v", err)
	}
	for _, m := range slices.Sorted(maps.Keys(c.Regression.Metrics)) {
		if _, ok := stats.Lookup(m); !ok {
			return fail("regression.metrics", "unknown metric %q (known: %s)", m, stats.Known())
		}
		if err := bounds.CheckFloat("threshold_pct", c.Regression.Metrics[m]); err != nil {
			return fail("regression.metrics", "%s: threshold %v", m, err)
		}
	}
	if a := c.Regression.Alpha; a != 0 || set("regression.alpha") {
		if err := bounds.CheckFloat("alpha", a); err != nil {
			return fail("regression.alpha", "%v, e.g. 0.05", err)
		}
	}
	if c.Bench.ReadyTimeout != "" {
		d, err := time.ParseDuration(c.Bench.ReadyTimeout)
		if err != nil {
			return fail("bench.ready_timeout", "%v", err)
		}
		if err := bounds.CheckDuration("ready_timeout", d); err != nil {
			return fail("bench.ready_timeout", "%v, e.g. \"20m\"", err)
		}
	}
	for _, r := range []struct {
		key            string
		v, least, most int
	}{
		{"history.window", c.History.Window, 1, 1000}, {"build.jobs", c.Build.Jobs, int(bounds.Bench["jobs"].Min), int(bounds.Bench["jobs"].Max)},
	} {
		if set(r.key) && (r.v < r.least || r.v > r.most) {
			return fail(r.key, "%d: use %d to %d", r.v, r.least, r.most)
		}
	}
	// The bench's counts have the ranges a recipe's have (package bounds).
	for _, r := range []struct {
		key string
		v   int
	}{{"trials", c.Bench.Trials}, {"warmup", c.Bench.Warmup}, {"num_prompts", c.Bench.NumPrompts}, {"max_new_tokens", c.Bench.MaxNewTokens}} {
		if set("bench." + r.key) {
			if err := bounds.Check(r.key, int64(r.v)); err != nil {
				return fail("bench."+r.key, "%v", err)
			}
		}
	}
	if set("bench.concurrency") {
		if err := recipes.CheckLevels(c.Bench.Concurrency); err != nil {
			return fail("bench.concurrency", "%v", err)
		}
	}
	if err := bounds.CheckFloat("agree_threshold", c.Bench.AgreeThreshold); err != nil {
		return fail("bench.agree_threshold", "%v, e.g. %v (0 turns the output check off)", err, bench.DefaultAgreeThreshold)
	}
	return nil
}

// checkNames checks what the file names rather than counts: build.tool,
// the arms (a recipe name or a file, not both), the bench's server URLs
// (two of one server compare nothing) and the plot's format.
func (c *Config) checkNames(set func(string) bool, fail failFunc) error {
	if !recipes.ValidTool(c.Build.Tool) {
		return fail("build.tool", "%q: use %s", c.Build.Tool, recipes.ToolsText)
	}
	for _, arm := range []string{"a", "b"} {
		if set("arms."+arm) && set("arms."+arm+"_file") {
			return fail("arms."+arm+"_file", "arms.%s and arms.%s_file are exclusive; keep one", arm, arm)
		}
	}
	for _, u := range []struct{ key, v string }{{"bench.url_a", c.Bench.URLA}, {"bench.url_b", c.Bench.URLB}} {
		if u.v != "" {
			if err := bench.CheckURL(u.v); err != nil {
				return fail(u.key, "%v", err)
			}
		}
	}
	if c.Bench.URLA != "" && bench.SameServer(c.Bench.URLA, c.Bench.URLB) {
		return fail("bench.url_b", "%s is also bench.url_a: an A/B of one server measures nothing", c.Bench.URLB)
	}
	// A history that cannot be one (a URL that does not parse, holds a
	// password or is no PostgreSQL URL) is found now, not after the night.
	if err := history.CheckTarget(c.History.Path); err != nil {
		return fail("history.path", "%v", err)
	}
	if c.History.Keep != "" {
		if err := history.CheckKeep(c.History.Keep); err != nil {
			return fail("history.keep", "%v", err)
		}
	}
	if c.Outputs.Plot != "" {
		if err := history.PlotFormat(c.Outputs.Plot); err != nil {
			return fail("outputs.plot", "%v", err)
		}
	}
	return nil
}
