// Package merge3test makes the inputs of differential tests of
// three-way merges: random edits of a base text for "ours" and "theirs",
// whose merge internal/merge3's tests and patches/port's compare with
// git's. It is for tests only, and it holds no git repository (that is
// internal/testrepo).
package merge3test

import (
	"fmt"
	"math/rand"
	"slices"
)

// RandomEdit returns a copy of lines with one to three random edits: a
// line replaced, a line inserted or a line deleted. New lines carry tag
// and a random number, so they are unique and any two correct line diffs
// of the result agree (differential tests against git rely on it).
func RandomEdit(rng *rand.Rand, lines []string, tag string) []string {
	out := slices.Clone(lines)
	for n := 1 + rng.Intn(3); n > 0; n-- {
		if len(out) == 0 {
			out = append(out, fmt.Sprintf("%s only %d\n", tag, rng.Int()))
			continue
		}
		at := rng.Intn(len(out))
		switch rng.Intn(3) {
		case 0:
			out[at] = fmt.Sprintf("%s changed %d\n", tag, rng.Int())
		case 1:
			out = slices.Insert(out, at, fmt.Sprintf("%s inserted %d\n", tag, rng.Int()))
		default:
			out = slices.Delete(out, at, at+1)
		}
	}
	return out
}
