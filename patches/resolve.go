package patches

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc/githash"
)

// Choice is the series picked for a tree, with its verified patches.
type Choice struct {
	Series  *Series
	Patches []*Patch
	// Reason says why this series: "tested on <commit>", "forced by
	// --series", or "applies to <commit>, which it was not tested on".
	Reason string
}

// NoSeriesError says that no series of the family fits the commit.
type NoSeriesError struct {
	Want    string
	Commit  string
	Known   []*Series
	Details []string // why each candidate did not fit
	// Check is the `arpatch patches check` command that shows every hunk
	// (Catalog.CheckCommand), filled by the caller that knows the
	// repository.
	Check string
}

func (e *NoSeriesError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no %q series fits commit %s", e.Want, e.Commit)
	for _, d := range e.Details {
		b.WriteString("\n  " + d)
	}
	b.WriteString("\nknown series:")
	for _, s := range e.Known {
		fmt.Fprintf(&b, "\n  %-16s family %-8s tested on %s", s.Name, s.Family, cmp.Or(githash.Shorts(s.TestedOn), "(none)"))
	}
	check := e.Check
	if check == "" {
		check = (&Catalog{}).CheckCommand("SGLANG_REPO", e.Commit)
	}
	fmt.Fprintf(&b, "\nrun `%s` to see how each series fits, or pick one with --series", check)
	return b.String()
}

// AmbiguousError says that more than one series fits and none was tested on
// the commit; arpatch refuses to guess.
type AmbiguousError struct {
	Commit string
	Fits   []string
	Tested bool // all of them list the commit in tested_on
}

func (e *AmbiguousError) Error() string {
	if e.Tested {
		return fmt.Sprintf("series %s all list commit %s in tested_on; arpatch will not guess: pick one with --series", strings.Join(e.Fits, " and "), githash.Hash(e.Commit).Short())
	}
	return fmt.Sprintf("series %s all apply to commit %s and none was tested on it; pick one with --series", strings.Join(e.Fits, " and "), githash.Hash(e.Commit).Short())
}

// CheckForce returns an error when force (--series) names neither a
// series nor a family of the catalog, or names a series that did not load
// (its loading error): what Resolve refuses before it reads any tree, so
// that a caller can refuse it before it clones one.
func (c *Catalog) CheckForce(force string) error {
	if k := c.skipped(force); k != nil && len(c.Members(force)) == 0 {
		return k.Err // never applied: say why it did not load
	}
	if _, err := c.Get(force); err != nil && len(c.Members(force)) == 0 {
		return fmt.Errorf("--series %q names no series or family; known series: %s", force, c.names())
	}
	return nil
}

// Resolve picks the series for a tree at commit. want is the recipe's
// `series` (a family such as "pcie", or one series' name); force is
// --series. Without force, a series whose tested_on lists the commit wins;
// otherwise each member is checked against tree and the single one that
// applies (exactly or with offsets) is taken. Patches named in skip are left
// out. It returns a *NoSeriesError when none fits, an *AmbiguousError when
// several do, or the loading errors of Series.Load.
func (c *Catalog) Resolve(want, force, commit string, tree Tree, skip []string) (*Choice, error) {
	if force != "" {
		if err := c.CheckForce(force); err != nil {
			return nil, err
		}
		if s, err := c.Get(force); err == nil {
			ps, err := s.Load(skip)
			if err != nil {
				return nil, err
			}
			return &Choice{Series: s, Patches: ps, Reason: "forced by --series"}, nil
		}
		want = force // a family: choose within it by commit
	}
	members := c.Members(want)
	if k := c.skipped(want); k != nil && len(members) == 0 {
		return nil, k.Err
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("recipe names series %q, but no series has that name or family; known series: %s", want, c.names())
	}
	var tested []*Series
	for _, s := range members {
		if slices.Contains(s.TestedOn, commit) {
			tested = append(tested, s)
		}
	}
	if len(tested) > 1 {
		var names []string
		for _, s := range tested {
			names = append(names, s.Name)
		}
		return nil, &AmbiguousError{Commit: commit, Fits: names, Tested: true}
	}
	if len(tested) == 1 {
		ps, err := tested[0].Load(skip)
		if err != nil {
			return nil, err
		}
		return &Choice{Series: tested[0], Patches: ps, Reason: "tested on " + githash.Hash(commit).Short()}, nil
	}
	var fits []*Choice
	var details []string
	for _, s := range members {
		ps, err := s.Load(skip)
		if err != nil {
			return nil, err
		}
		fit, why := fitsTree(tree, ps)
		if fit {
			fits = append(fits, &Choice{Series: s, Patches: ps, Reason: fmt.Sprintf("applies to %s, which it was not tested on (%s)", githash.Hash(commit).Short(), why)})
		} else {
			details = append(details, fmt.Sprintf("%s: %s", s.Name, why))
		}
	}
	switch len(fits) {
	case 1:
		return fits[0], nil
	case 0:
		for _, k := range c.Skipped {
			if k.Family == want || k.Name == want {
				details = append(details, fmt.Sprintf("%s: passed over, as it does not load: %v", k.Name, k.Err))
			}
		}
		return nil, &NoSeriesError{Want: want, Commit: commit, Known: c.Series, Details: details}
	default:
		var names []string
		for _, f := range fits {
			names = append(names, f.Series.Name)
		}
		return nil, &AmbiguousError{Commit: commit, Fits: names}
	}
}

// fitsTree says whether every patch applies, exactly or with offsets, or
// the tree already holds every patch; the string says how, or why not.
func fitsTree(tree Tree, ps []*Patch) (bool, string) {
	res := Check(tree, ps)
	v := Verdict(res)
	switch v {
	case VerdictConflict:
		for _, r := range res {
			if r.Fit == FitConflict {
				return false, r.Err.Error()
			}
		}
	case VerdictPartial:
		return false, "some patches are already in the tree, others are not"
	}
	return true, string(v)
}
