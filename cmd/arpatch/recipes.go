package main

import (
	"cmp"
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/recipes"
)

// newCmdRecipes is recipes, listing the recipes with runF
// (recipesListRun); its show subcommand runs recipesShowRun.
func newCmdRecipes(runF func(context.Context, struct{}, streams) error) *cli.Command {
	return &cli.Command{
		Name:      "recipes",
		Usage:     "list the embedded recipes, or show one resolved",
		UsageText: "arpatch recipes [show NAME | show --recipe-file PATH]",
		Description: `Examples:
   arpatch recipes
   arpatch recipes show pcie
   arpatch recipes show pcie > my-recipe.toml
   arpatch recipes show --recipe-file my-recipe.toml`,
		// noArgs lets the subcommand's name through.
		Before:      noArgs,
		Action:      act(&struct{}{}, noFlags, runF),
		Subcommands: []*cli.Command{newCmdRecipesShow(recipesShowRun)},
	}
}

// newCmdRecipesShow is recipes show, printing its recipe with runF
// (recipesShowRun).
func newCmdRecipesShow(runF func(context.Context, *recipes.Recipe, streams) error) *cli.Command {
	var f recipesShowFlags
	return &cli.Command{
		Name:      "show",
		Usage:     "print one recipe with every default filled in",
		UsageText: "arpatch recipes show NAME | arpatch recipes show --recipe-file PATH",
		Description: `Prints the recipe as TOML with every default filled in, and where it came
from.

Examples:
   arpatch recipes show pcie
   arpatch recipes show pcie > my-recipe.toml
   arpatch recipes show --recipe-file my-recipe.toml`,
		Flags:  []cli.Flag{recipeFileFlag(&f.RecipeFile)},
		Action: act(&f, recipesShowOpts, runF),
	}
}

// recipesListRun prints every embedded recipe.
func recipesListRun(_ context.Context, _ struct{}, s streams) error {
	for _, n := range recipes.Names() {
		r, err := recipes.Embedded(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(s.Out, "%-10s %s\n           series %s at %s\n", r.Name, r.Description, cmp.Or(r.Series, "(none)"), r.Upstream.Commit)
	}
	return nil
}

// recipesShowFlags are recipes show's flags and arguments.
type recipesShowFlags struct {
	RecipeFile string
	cmdline    // the recipe's name
}

// recipesShowOpts returns the one recipe named by the argument or
// --recipe-file.
func recipesShowOpts(f recipesShowFlags) (*recipes.Recipe, error) {
	switch {
	case f.RecipeFile != "" && len(f.Args) == 0:
		return recipeFile("recipe-file", expandHome(f.RecipeFile))
	case f.RecipeFile == "" && len(f.Args) == 1:
		r, err := recipes.Embedded(f.Args[0])
		if err != nil {
			return nil, usagef("%w (or use arpatch recipes show --recipe-file PATH)", err)
		}
		return r, nil
	}
	return nil, usagef("recipes show takes one recipe NAME or --recipe-file PATH")
}

// recipesShowRun prints the recipe with every default filled in.
func recipesShowRun(_ context.Context, r *recipes.Recipe, s streams) error {
	b, err := r.Encode()
	if err != nil {
		return err
	}
	_, err = s.Out.Write(b)
	return err
}
