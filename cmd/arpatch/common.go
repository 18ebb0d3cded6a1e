package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// Flags shared by several commands; functions, so that each command gets
// its own flag values.
func recipeFlag() cli.Flag {
	return &cli.StringFlag{
		Name:  "recipe",
		Usage: "embedded recipe `NAME` (see `arpatch recipes`), e.g. --recipe pcie",
		Value: "pcie",
	}
}

func recipeFileFlag() cli.Flag {
	return &cli.StringFlag{
		Name:  "recipe-file",
		Usage: "load the recipe from `PATH` instead, e.g. --recipe-file my-recipe.toml",
	}
}

func srcFlag() cli.Flag {
	return &cli.StringFlag{
		Name:  "src",
		Usage: "SGLang checkout `DIR`, e.g. --src ~/work/sglang",
		Value: "sglang",
	}
}

func patchesDirFlag() cli.Flag {
	return &cli.StringFlag{
		Name:  "patches-dir",
		Usage: "use the series under `DIR` (shaped like patches/sglang/) instead of the embedded ones",
	}
}

func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print machine-readable JSON instead of text"}
}

// loadRecipe returns the recipe chosen by --recipe-file or --recipe.
func loadRecipe(c *cli.Context) (*recipes.Recipe, error) {
	if p := c.String("recipe-file"); p != "" {
		if c.IsSet("recipe") {
			return nil, usagef("--recipe and --recipe-file are exclusive; pass one")
		}
		return recipeFile(expandHome(p))
	}
	r, err := recipes.Embedded(c.String("recipe"))
	if err != nil {
		return nil, usageError{err} // a --recipe that names no recipe
	}
	return r, nil
}

// recipeFile reads a recipe file: one that is missing, malformed or out
// of range is the invocation's mistake (exit 2), as a bad flag is; exit 1
// means an INVALID or slower arm, a failed check.
func recipeFile(p string) (*recipes.Recipe, error) {
	r, err := recipes.File(p)
	if err != nil {
		return nil, usageError{err}
	}
	return r, nil
}

// loadCatalog returns the series from --patches-dir, or the embedded ones.
func loadCatalog(c *cli.Context) (*patches.Catalog, error) {
	if d := c.String("patches-dir"); d != "" {
		cat, err := patches.LoadDir(expandHome(d))
		if err != nil {
			return nil, err
		}
		// A draft that is not sealed yet must not block the other
		// series beside it: it is passed over, and said so.
		for _, l := range cat.PassedOver() {
			first, _, _ := strings.Cut(l, "\n")
			fmt.Fprintf(c.App.ErrWriter, "arpatch: note: %s\n", first)
		}
		return cat, nil
	}
	return patches.Embedded()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// pathFlag returns a path flag's value with "~/" expanded.
func pathFlag(c *cli.Context, name string) string {
	return expandHome(c.String(name))
}
