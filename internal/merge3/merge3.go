// Package merge3 merges two edits of one text line by line, as diff3 and
// `git merge-file` do: base is the common ancestor, ours and theirs are
// its two descendants. A change only one side made is taken; the same
// change made by both is taken once; changes of both sides that overlap
// or touch in base (no unchanged base line between them) are a conflict,
// reported with base's, ours' and theirs' lines and never merged.
//
// It is not a general merge tool: there are no conflict markers, no
// whitespace options and no renames; arpatch's `patches port` uses it to
// carry a patch (ours = base + patch) onto a later upstream file (theirs)
// and refuses to write anything that conflicts. The line diffs come from
// go-git's utils/diff (Myers, via sergi/go-diff); the merge rule is the
// one of git's xdiff/xmerge.c (xdl_merge): a change is clean when it ends
// strictly before the other side's next change begins. Tested
// differentially against `git merge-file`.
package merge3

import (
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/utils/diff"
	"github.com/sergi/go-diff/diffmatchpatch"
)

// Conflict is a base range both sides changed differently.
type Conflict struct {
	BaseStart int      // 0-based first base line of the range
	BaseEnd   int      // 0-based end (exclusive); BaseStart == BaseEnd for an insertion point
	Base      []string // base[BaseStart:BaseEnd]
	Ours      []string // what ours has there
	Theirs    []string // what theirs has there
}

// Result is a merge. Lines is the merged text, meaningful only when
// Conflicts is empty (a conflicted range holds theirs' lines there).
type Result struct {
	Lines     []string
	Conflicts []Conflict
}

// Clean reports whether the merge has no conflict.
func (r *Result) Clean() bool { return len(r.Conflicts) == 0 }

// Edit replaces base[BaseStart:BaseEnd] with side[SideStart:SideEnd].
type Edit struct {
	BaseStart, BaseEnd int
	SideStart, SideEnd int
}

// Diff returns the edits that turn a into b, in order, each maximal (two
// edits are always separated by at least one unchanged line). Lines keep
// their newlines; they are compared byte for byte.
func Diff(a, b []string) []Edit {
	var out []Edit
	ai, bi := 0, 0
	var cur *Edit
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	for _, d := range diff.Do(strings.Join(a, ""), strings.Join(b, "")) {
		n := countLines(d.Text)
		if d.Type == diffmatchpatch.DiffEqual {
			flush()
			ai += n
			bi += n
			continue
		}
		if cur == nil {
			cur = &Edit{BaseStart: ai, BaseEnd: ai, SideStart: bi, SideEnd: bi}
		}
		if d.Type == diffmatchpatch.DiffDelete {
			ai += n
			cur.BaseEnd = ai
		} else {
			bi += n
			cur.SideEnd = bi
		}
	}
	flush()
	return out
}

// countLines counts the lines of a diff text made of whole lines (the
// last may lack its newline).
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

type sided struct {
	Edit
	theirs bool
}

// Merge merges ours and theirs, both descended from base.
func Merge(base, ours, theirs []string) *Result {
	var all []sided
	oe, te := Diff(base, ours), Diff(base, theirs)
	// Interleave by base position; on a tie ours comes first (the order
	// does not change the result: tied edits always form one region).
	i, j := 0, 0
	for i < len(oe) || j < len(te) {
		if j >= len(te) || (i < len(oe) && oe[i].BaseStart <= te[j].BaseStart) {
			all = append(all, sided{oe[i], false})
			i++
		} else {
			all = append(all, sided{te[j], true})
			j++
		}
	}
	r := &Result{}
	pos := 0 // next base line to copy
	for k := 0; k < len(all); {
		// A region: edits that overlap or touch in base.
		start, end := all[k].BaseStart, all[k].BaseEnd
		var group []sided
		for k < len(all) && (len(group) == 0 || all[k].BaseStart <= end) {
			group = append(group, all[k])
			end = max(end, all[k].BaseEnd)
			k++
		}
		r.Lines = append(r.Lines, base[pos:start]...)
		pos = end
		var hasOurs, hasTheirs bool
		for _, g := range group {
			if g.theirs {
				hasTheirs = true
			} else {
				hasOurs = true
			}
		}
		ot := sideText(base, ours, start, end, group, false)
		tt := sideText(base, theirs, start, end, group, true)
		switch {
		case !hasTheirs:
			r.Lines = append(r.Lines, ot...)
		case !hasOurs:
			r.Lines = append(r.Lines, tt...)
		case slices.Equal(ot, tt):
			r.Lines = append(r.Lines, ot...)
		default:
			r.Conflicts = append(r.Conflicts, Conflict{BaseStart: start, BaseEnd: end, Base: slices.Clone(base[start:end]), Ours: ot, Theirs: tt})
			r.Lines = append(r.Lines, tt...)
		}
	}
	r.Lines = append(r.Lines, base[pos:]...)
	return r
}

// sideText is what one side holds for base[start:end]: base's lines with
// that side's edits of the group applied.
func sideText(base, side []string, start, end int, group []sided, theirs bool) []string {
	var out []string
	pos := start
	for _, g := range group {
		if g.theirs != theirs {
			continue
		}
		out = append(out, base[pos:g.BaseStart]...)
		out = append(out, side[g.SideStart:g.SideEnd]...)
		pos = g.BaseEnd
	}
	return append(out, base[pos:end]...)
}
