package nightly

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/recipes"
)

// TestWorkloadKeyIsWhatTheBenchSends: recipe B's [bench] workload is the
// bench's prompts, and the history key names that file with its content's
// digest: another content under the same path is another key, the
// built-in prompts are keyed as such.
func TestWorkloadKeyIsWhatTheBenchSends(t *testing.T) {
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recipe := func(wl string) *recipes.Recipe {
		t.Helper()
		p := filepath.Join(dir, "b.toml")
		write(p, "name = \"b\"\nseries = \"pcie\"\n[upstream]\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n[bench]\nnum_prompts = 3\n"+wl)
		r, err := recipes.File(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cfgPath := filepath.Join(dir, "nightly.toml")
	write(cfgPath, "[arms]\na = \"baseline\"\nb_file = \"b.toml\"\n")
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := recipes.Embedded("baseline")
	if err != nil {
		t.Fatal(err)
	}
	write(prompts, "{\"prompt\": \"alpha\"}\n{\"prompt\": \"beta\"}\n")
	b := recipe("workload = \"" + prompts + "\"\n")
	bo, err := BenchOptions(cfg, Options{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(bo.Prompts, ","); got != "alpha,beta,alpha" {
		t.Errorf("the bench sends %q, want the recipe's workload (alpha,beta,alpha)", got)
	}
	key := workloadKey(cfg, Options{}, a, b)
	if want := "prompts=" + workload.Identity(prompts, []string{"alpha", "beta"}) + ":3 "; !strings.Contains(key, want) || !strings.HasPrefix(workload.Identity(prompts, nil), prompts+"@sha256:") {
		t.Errorf("key %q does not hold %q", key, want)
	}
	write(prompts, "{\"prompt\": \"alpha\"}\n{\"prompt\": \"gamma\"}\n")
	if again := workloadKey(cfg, Options{}, a, b); again == key {
		t.Errorf("edited prompts under the same path keep the key %q", key)
	}
	builtin := workloadKey(cfg, Options{}, a, recipe(""))
	if want := "prompts=" + workload.Identity(recipes.BuiltinWorkload, workload.Builtin()) + ":3 "; !strings.Contains(builtin, want) {
		t.Errorf("built-in key %q does not hold %q", builtin, want)
	}
}
