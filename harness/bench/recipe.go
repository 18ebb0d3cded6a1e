package bench

import (
	"fmt"
	"maps"
	"slices"

	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/harness/workload"
	"github.com/arpatch/arpatch/recipes"
)

// CheckRecipe runs the checks of a recipe that belong to the harness,
// which package recipes (below it) cannot make: each variable of [env]
// whose meaning arpatch knows (tune.CheckEnv), in name order, and the
// prompts of bench.workload unless it is recipes.BuiltinWorkload
// (workload.Load). recipes.File and recipes.Embedded check the rest. An
// error reads "source:line: key: problem", as theirs do.
func CheckRecipe(r *recipes.Recipe) error {
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		if err := tune.CheckEnv(k, r.Env[k]); err != nil {
			return r.KeyError("env."+k, err)
		}
	}
	if w := r.Bench.Workload; w != recipes.BuiltinWorkload {
		if _, err := workload.Load(w); err != nil {
			return r.KeyError("bench.workload", fmt.Errorf("%w (a relative path is relative to the recipe's directory)", err))
		}
	}
	return nil
}

// RecipeFile reads the recipe file at path (recipes.File) and checks it
// (CheckRecipe): every way a user's recipe reaches a command. A file that
// cannot be read is the *os.PathError, which names no flag: the caller
// names the flag or key that gave path.
func RecipeFile(path string) (*recipes.Recipe, error) {
	r, err := recipes.File(path)
	if err != nil {
		return nil, err
	}
	if err := CheckRecipe(r); err != nil {
		return nil, err
	}
	return r, nil
}
