package nightly

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ toml, want string }{
		{"[upstream]\nrepo = \"x\"\nrefs = \"main\"\n", `nightly.toml:3: unknown key "upstream.refs"`},
		{"[arms]\ncommit = \"latest\"\n", `nightly.toml:2: arms.commit: "latest": use "pinned" or "head"`},
		{"[regression]\nmetrics = { tok_s = 3.0, speed = 2.0 }\n", `unknown metric "speed"`},
		{"[regression]\nalpha = 1.5\n", "regression.alpha"},
		{"[bench]\nready_timeout = \"soon\"\n", "bench.ready_timeout"},
		{"[bench]\nready_timeout = \"-5m\"\n", `nightly.toml:2: bench.ready_timeout: -5m0s: use 1s to 48h0m0s, e.g. "20m"`},
		{"[bench]\nready_timeout = \"100000h\"\n", `nightly.toml:2: bench.ready_timeout: 100000h0m0s: use 1s to 48h0m0s`},
		{"[history]\nwindow = 0\n", "nightly.toml:2: history.window: 0: use 1 to 1000"},
		{"[bench]\ntrials = -1\n", "bench.trials: -1: use 1 to 1000"},
		// Every count is bounded, as in a recipe.
		{"[bench]\nnum_prompts = 9223372036854775807\n", "nightly.toml:2: bench.num_prompts: 9223372036854775807: use 1 to 100000"},
		{"[bench]\nwarmup = 9223372036854775807\n", "nightly.toml:2: bench.warmup: 9223372036854775807: use 0 to 10000"},
		{"[bench]\nmax_new_tokens = 0\n", "bench.max_new_tokens: 0: use 1 to 1048576"},
		{"[bench]\nconcurrency = [1, 100000]\n", "nightly.toml:2: bench.concurrency: 100000: use 1 to 4096"},
		{"[history]\nwindow = 9223372036854775807\n", "history.window: 9223372036854775807: use 1 to 1000"},
		{"[bench]\nagree_threshold = 7\n", "bench.agree_threshold: 7: use a share in [0, 1]"},
		// A NaN passes "v < 0 || v > 1" and would turn the check off;
		// every real-valued key refuses NaN and the infinities.
		{"[bench]\nconcurrency = [16, 4]\n", "nightly.toml:2: bench.concurrency: 4 after 16: list the levels in increasing order"},
		{"[bench]\nurl_a = \"notaurl\"\n", "nightly.toml:2: bench.url_a: notaurl is not a server URL"},
		{"[bench]\nagree_threshold = nan\n", "nightly.toml:2: bench.agree_threshold: NaN: not a number; use a share in [0, 1]"},
		{"[bench]\nagree_threshold = inf\n", "bench.agree_threshold: +Inf: not a finite number; use a share in [0, 1]"},
		{"[regression]\nthreshold_pct = nan\n", "nightly.toml:2: regression.threshold_pct: NaN: not a number; use a percentage in [0, 1000]"},
		{"[regression]\nthreshold_pct = -1.0\n", "regression.threshold_pct: -1: use a percentage in [0, 1000]"},
		{"[regression]\nmetrics = { tok_s = nan }\n", "regression.metrics: tok_s: threshold NaN: not a number"},
		{"[regression]\nmetrics = { tok_s = -inf }\n", "regression.metrics: tok_s: threshold -Inf: not a finite number"},
		{"[regression]\nalpha = nan\n", "nightly.toml:2: regression.alpha: NaN: not a number; use a level in (0, 1), e.g. 0.05"},
		{"[regression]\nalpha = 0.0\n", "regression.alpha: 0: use a level in (0, 1)"},
		{"[build]\njobs = -4\n", "build.jobs: -4: use 0 to 4096"},
		{"[build]\ntool = \"conda\"\n", `build.tool: "conda": use auto, uv or pip`},
		{"[bench]\nurl_a = \"http://h:1\"\nurl_b = \"http://h:1\"\n", "nightly.toml:3: bench.url_b: http://h:1 is also bench.url_a"},
		{"[outputs]\nplot = \"x.gif\"\n", "outputs.plot: x.gif: a plot is .svg, .png or .pdf"},
	} {
		p := filepath.Join(dir, "nightly.toml")
		must(t, os.WriteFile(p, []byte(tc.toml), 0o644))
		if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.toml, err, tc.want)
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "nightly.toml"), []byte(""), 0o644))
	c, err := LoadConfig(filepath.Join(dir, "nightly.toml"))
	if err != nil || c.Upstream.Ref != "main" || c.Arms.A != "baseline" || c.Arms.B != "pcie" || c.History.Window != 7 || c.Regression.Metrics["tok_s"] != 3 || !*c.Regression.RequireBFaster {
		t.Errorf("defaults: %+v %v", c, err)
	}
	// Working files nightly.toml does not name go under the state
	// directory, keyed by the config; what it names stays relative to it.
	state := filepath.Join(t.TempDir(), "state")
	t.Setenv("ARPATCH_STATE", state)
	c, err = LoadConfig(filepath.Join(dir, "nightly.toml"))
	key := ConfigKey(filepath.Join(dir, "nightly.toml"))
	if err != nil || c.Build.WorkDir != filepath.Join(state, "nightly", key, "work") || c.Bench.LogDir != filepath.Join(state, "nightly", key, "work", "logs") ||
		c.Outputs.Dir != filepath.Join(state, "nightly", key, "out") || c.History.Path != filepath.Join(state, "history.db") || c.Path(c.History.Path) != c.History.Path {
		t.Errorf("state defaults: work %s logs %s out %s db %s (%v)", c.Build.WorkDir, c.Bench.LogDir, c.Outputs.Dir, c.History.Path, err)
	}
	other := filepath.Join(t.TempDir(), "nightly.toml")
	must(t, os.WriteFile(other, []byte(""), 0o644))
	if c2, _ := LoadConfig(other); c2 == nil || c2.Build.WorkDir == c.Build.WorkDir || c2.Outputs.Dir == c.Outputs.Dir || c2.History.Path != c.History.Path {
		t.Errorf("two configs: %+v", c2)
	}
	must(t, os.WriteFile(filepath.Join(dir, "nightly.toml"), []byte("[build]\nwork_dir = \"w\"\n[history]\npath = \"h.db\"\n[outputs]\ndir = \"o\"\n"), 0o644))
	if c2, err := LoadConfig(filepath.Join(dir, "nightly.toml")); err != nil || c2.Path(c2.Build.WorkDir) != filepath.Join(dir, "w") || c2.Path(c2.Bench.LogDir) != filepath.Join(dir, "w", "logs") ||
		c2.Path(c2.History.Path) != filepath.Join(dir, "h.db") || c2.Path(c2.Outputs.Dir) != filepath.Join(dir, "o") {
		t.Errorf("named paths: %+v %v", c2, err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "nightly.toml"), []byte(""), 0o644))
	c, _ = LoadConfig(filepath.Join(dir, "nightly.toml"))
	if c.Bench.TrialsFor(0) != 5 || c.Bench.TrialsFor(3) != 3 || c.Bench.WarmupFor(0) != 0 || c.Bench.WarmupFor(2) != 2 || c.Bench.WarmupFor(4) != 4 || c.Bench.AgreeThreshold != 0.9 {
		t.Errorf("bench defaults and recipe values: trials %d/%d warmup %d/%d", c.Bench.TrialsFor(0), c.Bench.TrialsFor(3), c.Bench.WarmupFor(0), c.Bench.WarmupFor(4))
	}
	// Zero where zero means something is kept, not replaced by a default;
	// an interpreter path is relative to the config.
	must(t, os.WriteFile(filepath.Join(dir, "nightly.toml"), []byte("[bench]\nwarmup = 0\nagree_threshold = 0\n[regression]\nthreshold_pct = 0\n[build]\npython = \"venv/bin/python3\"\n"), 0o644))
	c, err = LoadConfig(filepath.Join(dir, "nightly.toml"))
	if err != nil || c.Bench.WarmupFor(4) != 0 || c.Bench.AgreeThreshold != 0 || c.Regression.ThresholdPct != 0 || c.Build.Python != filepath.Join(dir, "venv/bin/python3") {
		t.Errorf("explicit zeros: %v warmup %d agree %v threshold %v python %s", err, c.Bench.WarmupFor(4), c.Bench.AgreeThreshold, c.Regression.ThresholdPct, c.Build.Python)
	}
}
