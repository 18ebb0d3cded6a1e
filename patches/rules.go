package patches

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/patches/gaterule"
)

// Tag names arpatch knows from upstream facts (see package gaterule).
const (
	TagDispatchBranch = gaterule.TagDispatchBranch
	TagGateBypass     = gaterule.TagGateBypass
)

// builtinRequires holds the pairs arpatch enforces on every series,
// whatever its series.toml says: a patch tagged as the gate bypass needs
// one tagged as the dispatch branch before it. It is an early check on
// what the series declares; CheckResult judges what the patched tree
// does.
var builtinRequires = [][]string{{TagGateBypass, TagDispatchBranch}}

// CheckRequires enforces the series' requires pairs and arpatch's built-in
// pair on a selection of patches: when patch (or tag) A is selected, B
// must be too, and come first. It returns a *RequiresError naming both.
// It reads labels only; the effect rule is CheckResult.
func CheckRequires(series string, ps []*Patch, requires [][]string) error {
	index := func(x string) int {
		for i, p := range ps {
			if p.Name == x || slices.Contains(p.Provides, x) {
				return i
			}
		}
		return -1
	}
	pairs := append(append([][]string(nil), requires...), builtinRequires...)
	for _, pair := range pairs {
		a, b := index(pair[0]), index(pair[1])
		if a < 0 {
			continue
		}
		why := "the series does not include it"
		if b >= 0 && b > a {
			why = "it must come first in the series"
		} else if b >= 0 {
			continue
		}
		if slices.Equal(pair, builtinRequires[0]) {
			why += "; the gate bypass alone routes PCIe allreduces to a kernel branch that launches nothing, which returns unreduced data"
		}
		return &RequiresError{Series: series, Patch: ps[a].Name, Needs: pair[1], Why: why}
	}
	return nil
}

// declaresGates reports whether a selection says it opens SGLang's
// custom allreduce gates or branches the dispatch: a patch tagged as the
// gate bypass or the dispatch branch. The judge takes such a series'
// gates as open where it cannot run them.
func declaresGates(ps []*Patch) bool {
	for _, p := range ps {
		if slices.Contains(p.Provides, TagGateBypass) || slices.Contains(p.Provides, TagDispatchBranch) {
			return true
		}
	}
	return false
}

// CheckResult applies arpatch's built-in effect rule to the in-memory
// result res of applying ps to tree, before anything is written
// (gaterule.Judge): where SGLang's Python gates, imported from the patched
// tree and run on an emulated PCIe-only host, admit custom allreduce, the
// patched CustomAllreduce::allreduce, compiled as the build compiles it,
// must launch one kernel of a non-empty grid or throw on every call. The
// dispatch header is looked for among the files the series changes, the
// tree's files when it is a Lister, and upstream's known places. It
// returns a *gaterule.DispatchError when the tree fails, or an error
// reading it; what the judge could not check on this machine goes into
// res.Notes.
func CheckResult(tree Tree, res *Result, ps []*Patch) error {
	files := map[string]*FileResult{}
	for _, f := range res.Files {
		files[f.Path] = f
	}
	in := gaterule.Input{Declared: declaresGates(ps)}
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			in.Changed = append(in.Changed, fc.Path)
		}
	}
	in.Paths = slices.Clone(in.Changed)
	if l, ok := tree.(Lister); ok {
		all, err := l.Named(gaterule.DispatchBase)
		if err != nil {
			return err
		}
		in.Paths = append(in.Paths, all...)
	}
	in.Read = func(path string) ([]byte, error) {
		if f, ok := files[path]; ok {
			if f.After == nil {
				return nil, fs.ErrNotExist
			}
			return f.After, nil
		}
		return tree.ReadFile(path)
	}
	in.IsDir = func(path string) bool {
		for p, f := range files {
			if f.After != nil && strings.HasPrefix(p, path+"/") {
				return true
			}
		}
		d, ok := tree.(DirTree)
		return ok && d.IsDir(path)
	}
	in.BlobID = func(path string) (string, error) {
		if f, ok := files[path]; ok {
			if f.After == nil {
				return "", fs.ErrNotExist
			}
			return "", nil // the patched bytes, read and hashed
		}
		if b, ok := tree.(BlobTree); ok {
			return b.BlobID(path)
		}
		return "", nil
	}
	rep, err := gaterule.Judge(context.Background(), in)
	if err != nil {
		return err
	}
	res.Notes = append(res.Notes, rep.Notes...)
	return nil
}

// DirTree is a Tree that can say whether a path is a directory, so that
// the gate rule's Python judge finds namespace packages as Python does.
type DirTree interface {
	IsDir(path string) bool
}

// BlobTree is a Tree that knows the git blob id of a file without reading
// it (a commit's tree entry, a clean file's index entry): the gate rule's
// cached Python answers are then found without reading the files they
// depend on (gaterule.Input.BlobID, whose contract it has).
type BlobTree interface {
	BlobID(path string) (string, error)
}

// Lister is a Tree that can list its files of one name (slash paths
// relative to its root, of every file whose last element is base).
// CheckResult then finds the dispatch header wherever the tree keeps it,
// not only at the places upstream has used.
type Lister interface {
	Named(base string) ([]string, error)
}

// ApplyChecked is Apply followed by CheckResult: what every command that
// is about to write, or to report a series as fitting, runs.
func ApplyChecked(tree Tree, ps []*Patch) (*Result, error) {
	res, err := Apply(tree, ps)
	if err != nil {
		return nil, err
	}
	if err := CheckResult(tree, res, ps); err != nil {
		return nil, err
	}
	return res, nil
}

// IsRuleError reports whether err is a refusal by the built-in effect
// rule (as opposed to a patch that does not apply).
func IsRuleError(err error) bool {
	var de *gaterule.DispatchError
	return errors.As(err, &de)
}
