package kernels

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/recipes"
)

// FromRecipe: the recipe's [build] unless overridden, offline from
// either, paths made absolute, errors naming the setting.
func TestFromRecipe(t *testing.T) {
	t.Setenv("ARPATCH_CACHE", "rel-cache")
	rb := recipes.Build{Archs: []string{"120a"}, Jobs: 6, Tool: "pip", DepsDir: "deps", Offline: true}
	o, err := FromRecipe(rb, BuildOverrides{})
	if err != nil {
		t.Fatal(err)
	}
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if len(o.Archs) != 1 || o.Archs[0] != "120a" || o.Jobs != 6 || o.Tool != "pip" || !o.Offline || o.DepsDir != abs("deps") || o.Cache.Dir != abs("rel-cache") {
		t.Errorf("the recipe's [build]: %+v", o)
	}
	zero := 0
	o, err = FromRecipe(rb, BuildOverrides{Archs: []string{"90a,sm_120a"}, Jobs: &zero, Tool: "uv", DepsDir: "/d", CacheDir: "/c", Src: "src"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Archs) != 2 || o.Archs[0] != "120a" || o.Archs[1] != "90a" || o.Jobs != 0 || o.Tool != "uv" || !o.Offline || o.DepsDir != "/d" || o.Cache.Dir != "/c" || o.Src != abs("src") {
		t.Errorf("overridden: %+v", o)
	}
	if o, err = FromRecipe(recipes.Build{}, BuildOverrides{Offline: true, Archs: []string{"120a"}}); err != nil || !o.Offline || o.Tool != "" {
		t.Errorf("offline from the flag: %v %+v", err, o)
	}
	var se *SettingError
	if _, err := FromRecipe(rb, BuildOverrides{Archs: []string{"121x"}}); !errors.As(err, &se) || se.Setting != "archs" || !strings.HasPrefix(err.Error(), `archs: unknown CUDA arch "121x"`) {
		t.Errorf("unknown arch: %v", err)
	}
	if _, err := FromRecipe(recipes.Build{}, BuildOverrides{}); err == nil || !strings.HasPrefix(err.Error(), "archs: no CUDA arch given") {
		t.Errorf("no arch: %v", err)
	}
}
