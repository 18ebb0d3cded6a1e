package kernels

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// ABOptions holds every input of ABBuild.
type ABOptions struct {
	A, B    *recipes.Recipe
	Catalog *patches.Catalog
	Dir     string // holds the two checkouts, Dir/a and Dir/b, and ab-manifest.json
	Repo    string // clone source for both (--repo)
	Commit  string // commit for both, instead of the recipes' pins
	// PythonA and PythonB override Build.Python for one arm; arpatch
	// refuses the A/B build when that gives two toolchains.
	PythonA, PythonB string
	Build            BuildOptions // Src and Python are set per arm
	PlanOnly         bool
	// CheckoutProgress receives each arm's clone and checkout progress
	// (checkout.ApplyOptions.Progress: a terminal); nil for none.
	CheckoutProgress io.Writer
}

// ABArm is one side of an A/B build.
type ABArm struct {
	Recipe  string       `json:"recipe"`
	Src     string       `json:"src"`
	Series  string       `json:"series"`
	Patches []PatchInput `json:"patches"`
	Key     string       `json:"key"`
	Output  Output       `json:"output"`
	Hit     bool         `json:"cache_hit"`
}

// ABManifest is Dir/ab-manifest.json: the two arms and the inputs they
// share, showing that they differ only in their patches.
type ABManifest struct {
	Schema       int      `json:"schema"`
	Commit       string   `json:"commit"`
	A            ABArm    `json:"a"`
	B            ABArm    `json:"b"`
	Common       Inputs   `json:"common_inputs"` // every input but series and patches
	DifferOnlyIn []string `json:"differ_only_in"`
	// DifferingFiles lists the files whose bytes differ between the
	// arms' builds, each judged by ABDiff; Unexplained counts those
	// the patches do not explain.
	DifferingFiles []ABFile  `json:"differing_files"`
	Unexplained    int       `json:"unexplained"`
	CreatedAt      time.Time `json:"created_at"`
}

// ABMismatchError is an A/B pair whose inputs differ beyond the patches.
type ABMismatchError struct {
	Fields []string // "toolchain.torch: 2.11.0+cu130 vs 2.9.1+cu128"
}

func (e *ABMismatchError) Error() string {
	return "A/B builds must differ only in their patches, but these inputs differ:\n  " + strings.Join(e.Fields, "\n  ") +
		"\nbuild both arms with one toolchain and the same [build] settings"
}

// ABPlan is the two plans of an A/B build.
type ABPlan struct {
	A, B     *Plan
	Manifest *ABManifest
}

// ABBuild makes two checkouts of one pinned commit under opts.Dir, applies
// recipe A to one and B to the other, plans both builds and refuses
// (*ABMismatchError) unless their inputs differ only in series and
// patches: same commit, archs, builder, dependencies, build environment
// and toolchain. Then it builds both (through the cache) and writes
// Dir/ab-manifest.json. With PlanOnly it stops after the check.
func ABBuild(ctx context.Context, opts ABOptions, progress func(arm string) Progress) (*ABPlan, []*Result, error) {
	commit := opts.Commit
	if commit == "" {
		if opts.A.Upstream.Commit != opts.B.Upstream.Commit {
			return nil, nil, fmt.Errorf("recipe %s pins %s and recipe %s pins %s; an A/B build needs one commit: pass --commit", opts.A.Name, opts.A.Upstream.Commit, opts.B.Name, opts.B.Upstream.Commit)
		}
		commit = opts.A.Upstream.Commit
	}
	arms := [2]abArm{{"a", opts.A, opts.PythonA}, {"b", opts.B, opts.PythonB}}
	plans, err := planArms(ctx, opts, commit, arms)
	if err != nil {
		return nil, nil, err
	}
	ab, err := newABPlan(opts, plans, arms)
	if err != nil {
		return nil, nil, err
	}
	if opts.PlanOnly {
		return ab, nil, nil
	}
	var results []*Result
	for i, p := range plans {
		bo := opts.Build
		bo.Src = p.Src
		var prog Progress
		if progress != nil {
			prog = progress(arms[i].name)
		}
		r, err := Build(ctx, p, bo, prog)
		if err != nil {
			return ab, results, fmt.Errorf("arm %s (recipe %s): %w", arms[i].name, arms[i].recipe.Name, err)
		}
		results = append(results, r)
		arm := &ab.Manifest.A
		if i == 1 {
			arm = &ab.Manifest.B
		}
		arm.Hit = r.Hit
		if len(r.Manifest.Outputs) > 0 {
			arm.Output = r.Manifest.Outputs[0]
		}
	}
	ab.Manifest.DifferingFiles = ABDiff(plans[0], plans[1], results[0].Manifest, results[1].Manifest,
		opts.Build.Cache.EntryDir(plans[0].Key), opts.Build.Cache.EntryDir(plans[1].Key))
	for _, f := range ab.Manifest.DifferingFiles {
		if !f.Explained {
			ab.Manifest.Unexplained++
		}
	}
	ab.Manifest.CreatedAt = time.Now().UTC()
	b, _ := json.MarshalIndent(ab.Manifest, "", "  ")
	if err := safefs.WriteFile(filepath.Join(opts.Dir, "ab-manifest.json"), append(b, '\n'), 0o644); err != nil {
		return ab, results, err
	}
	return ab, results, nil
}

// abArm is one side of an A/B build: its name (a or b), its recipe and
// the Python that builds it ("" for the build options').
type abArm struct {
	name   string
	recipe *recipes.Recipe
	python string
}

// planArms checks each arm out at commit under opts.Dir/<arm>, applies
// its recipe and plans its build. Errors name the arm and its recipe.
func planArms(ctx context.Context, opts ABOptions, commit string, arms [2]abArm) ([2]*Plan, error) {
	var plans [2]*Plan
	for i, arm := range arms {
		src := filepath.Join(opts.Dir, arm.name)
		_, err := checkout.Apply(ctx, checkout.ApplyOptions{Recipe: arm.recipe, Catalog: opts.Catalog, Src: src, Repo: opts.Repo, Commit: opts.Commit, Version: opts.Build.Version,
			Progress: opts.CheckoutProgress, Again: "ab build"})
		if err != nil {
			return plans, fmt.Errorf("arm %s (recipe %s): %w", arm.name, arm.recipe.Name, err)
		}
		bo := opts.Build
		bo.Src = src
		if arm.python != "" {
			bo.Python, bo.PythonFlag = arm.python, "--python-"+arm.name
		}
		if plans[i], err = PlanBuild(ctx, bo); err != nil {
			return plans, fmt.Errorf("arm %s (recipe %s): %w", arm.name, arm.recipe.Name, err)
		}
	}
	return plans, nil
}

// newABPlan refuses two plans whose inputs differ in more than series and
// patches (*ABMismatchError) or not at all, and returns the A/B plan with
// its manifest: the common inputs and each arm's recipe, series, patches
// and key.
func newABPlan(opts ABOptions, plans [2]*Plan, arms [2]abArm) (*ABPlan, error) {
	if diff := diffInputs(plans[0].Inputs, plans[1].Inputs); len(diff) > 0 {
		return nil, &ABMismatchError{Fields: diff}
	}
	if plans[0].Key == plans[1].Key {
		return nil, fmt.Errorf("recipes %s and %s give the same build (series %s, same patches, key %s): an A/B of them measures nothing; pick recipes that differ in their patches (e.g. --a baseline --b pcie)",
			opts.A.Name, opts.B.Name, cmp.Or(plans[0].Inputs.Series, "(none)"), digest.Short(plans[0].Key))
	}
	ab := &ABPlan{A: plans[0], B: plans[1]}
	common := plans[0].Inputs
	common.Series, common.Patches = "", nil
	ab.Manifest = &ABManifest{Schema: 1, Commit: plans[0].Inputs.Commit, Common: common, DifferOnlyIn: []string{"series", "patches"}}
	for i, p := range plans {
		arm := ABArm{Recipe: arms[i].recipe.Name, Src: p.Src, Series: p.Inputs.Series, Patches: p.Inputs.Patches, Key: p.Key}
		if i == 0 {
			ab.Manifest.A = arm
		} else {
			ab.Manifest.B = arm
		}
	}
	return ab, nil
}

// diffInputs lists the fields, other than series and patches, in which two
// builds' inputs differ, as "field: a vs b".
func diffInputs(a, b Inputs) []string {
	a.Series, a.Patches, b.Series, b.Patches = "", nil, "", nil
	var out []string
	flatten := func(in Inputs) map[string]string {
		var m map[string]any
		raw, _ := json.Marshal(in)
		_ = json.Unmarshal(raw, &m) // raw is Marshal's output of a struct: it decodes
		flat := map[string]string{}
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			if mm, ok := v.(map[string]any); ok {
				for k, x := range mm {
					walk(strings.TrimPrefix(prefix+"."+k, "."), x)
				}
				return
			}
			raw, _ := json.Marshal(v)
			flat[prefix] = string(raw)
		}
		walk("", m)
		return flat
	}
	fa, fb := flatten(a), flatten(b)
	keys := map[string]bool{}
	for k := range fa {
		keys[k] = true
	}
	for k := range fb {
		keys[k] = true
	}
	for k := range keys {
		if !reflect.DeepEqual(fa[k], fb[k]) {
			out = append(out, fmt.Sprintf("%s: %s vs %s", k, cmp.Or(fa[k], "(unset)"), cmp.Or(fb[k], "(unset)")))
		}
	}
	sort.Strings(out)
	return out
}
