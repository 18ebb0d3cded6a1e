package main

import (
	"cmp"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/recipes"
)

func recipesCommand() *cli.Command {
	return &cli.Command{
		Name:      "recipes",
		Usage:     "list the embedded recipes, or show one resolved",
		UsageText: "arpatch recipes [show NAME | show --recipe-file PATH]",
		Description: `Examples:
   arpatch recipes
   arpatch recipes show pcie
   arpatch recipes show --recipe-file my-recipe.toml`,
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			for _, n := range recipes.Names() {
				r, err := recipes.Embedded(n)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "%-10s %s\n           series %s at %s\n", r.Name, r.Description, cmp.Or(r.Series, "(none)"), r.Upstream.Commit)
			}
			return nil
		},
		Subcommands: []*cli.Command{{
			Name:      "show",
			Usage:     "print one recipe with every default filled in",
			UsageText: "arpatch recipes show NAME | arpatch recipes show --recipe-file PATH",
			Flags:     []cli.Flag{recipeFileFlag()},
			Action: func(c *cli.Context) error {
				var r *recipes.Recipe
				var err error
				switch {
				case c.String("recipe-file") != "" && c.Args().Len() == 0:
					r, err = recipeFile(expandHome(c.String("recipe-file")))
				case c.String("recipe-file") == "" && c.Args().Len() == 1:
					r, err = recipes.Embedded(c.Args().First())
				default:
					return usagef("recipes show takes one recipe NAME or --recipe-file PATH")
				}
				if err != nil {
					return err
				}
				b, err := r.Encode()
				if err != nil {
					return err
				}
				_, err = c.App.Writer.Write(b)
				return err
			},
		}},
	}
}
