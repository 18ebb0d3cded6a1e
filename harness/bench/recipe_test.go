package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/recipes"
)

// TestCheckRecipe: a recipe's variables whose meaning arpatch knows are
// refused with a bad value, naming the recipe's file, line and key; the
// shipped recipes pass.
func TestCheckRecipe(t *testing.T) {
	const pin = "name = \"r\"\n[upstream]\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n[env]\n"
	for _, tc := range []struct{ env, want string }{
		{"SGLANG_PCIE_CUSTOM_AR_MAX_BYTES = \"lots\"", `r.toml:5: env.SGLANG_PCIE_CUSTOM_AR_MAX_BYTES: SGLANG_PCIE_CUSTOM_AR_MAX_BYTES="lots": expected a whole number of bytes`},
		{"SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES = \"16K\"", `r.toml:5: env.SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES="16K": expected a whole number of bytes`},
		{"SGLANG_CUSTOM_ALLREDUCE_ALGO = \"3stage\"", `r.toml:5: env.SGLANG_CUSTOM_ALLREDUCE_ALGO: "3stage": sgl-kernel accepts 1stage, oneshot, 2stage, twoshot`},
		{"SGLANG_FORCE_CUSTOM_AR_PCIE = \"maybe\"", `r.toml:5: env.SGLANG_FORCE_CUSTOM_AR_PCIE: "maybe": the pcie series reads it as off (it opens the gate for 1, true, yes or on, in any case); want "1" (on) or "0" (off)`},
		{"SGLANG_PCIE_CUSTOM_AR_ISLANDS = \"0,1/1\"", `r.toml:5: env.SGLANG_PCIE_CUSTOM_AR_ISLANDS: SGLANG_PCIE_CUSTOM_AR_ISLANDS=`},
	} {
		r, err := recipes.Parse("r.toml", []byte(pin+tc.env+"\n"))
		if err != nil {
			t.Fatalf("%s: recipes.Parse: %v", tc.env, err)
		}
		if err := CheckRecipe(r); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s...", tc.env, err, tc.want)
		}
	}
	for _, n := range recipes.Names() {
		r, err := recipes.Embedded(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckRecipe(r); err != nil {
			t.Errorf("embedded %s: %v", n, err)
		}
	}
}

// TestRecipeFile: bench.workload's prompts are loaded when a recipe file
// is read, relative to the file's directory; one that does not load is an
// error naming file, line and key, and no flag.
func TestRecipeFile(t *testing.T) {
	const pin = "name = \"r\"\n[upstream]\ncommit = \"84118acf50b3a4c74e85e9ff9033792552de1a76\"\n"
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(filepath.Join(sub, "deps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "p.jsonl"), []byte(`{"prompt": "hi"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for body, want := range map[string]string{
		"[bench]\nworkload = \"p.jsonl\"\n":    "",
		"[bench]\nworkload = \"builtin\"\n":    "",
		"[bench]\nworkload = \"nope.jsonl\"\n": "sub/r.toml:5: bench.workload: open " + filepath.Join(sub, "nope.jsonl") + ": no such file or directory (a relative path is relative to the recipe's directory)",
		"[bench]\nworkload = \"deps\"\n":       "sub/r.toml:5: bench.workload: read " + filepath.Join(sub, "deps") + ": is a directory (a relative path is relative to the recipe's directory)",
	} {
		if err := os.WriteFile(filepath.Join(sub, "r.toml"), []byte(pin+body), 0o644); err != nil {
			t.Fatal(err)
		}
		got := ""
		if _, err := RecipeFile("sub/r.toml"); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%q:\n got %q\nwant %q", body, got, want)
		}
	}
}
