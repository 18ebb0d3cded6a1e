package patches

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
)

// Tree is read access to a source tree: a checkout on disk, or a commit in a
// git object store.
type Tree interface {
	// ReadFile returns the bytes of the file at a slash-separated,
	// tree-relative path, or an error wrapping fs.ErrNotExist when it is
	// absent.
	ReadFile(path string) ([]byte, error)
}

// Patch is one verified patch of a series, parsed.
type Patch struct {
	Name     string   // file name, e.g. "0001-pcie-dispatch-branch.patch"
	SHA256   string   // hex sha256 of the file's bytes, as listed in series.toml
	Provides []string // capability tags from series.toml, e.g. "pcie-dispatch-branch"
	Diff     *Diff
}

// FileResult is the net effect of a series on one file.
type FileResult struct {
	Path   string
	Op     Op     // Create, Delete or Modify, from the tree's state before to after
	Before []byte // nil when the file did not exist
	After  []byte // nil when the series deletes the file
	Mode   string // git mode for a created file, or the new mode of a kept file whose mode a patch changed
	// OldMode is the mode the patch says a kept file had, when it changes
	// the mode (Mode then holds the new one); "" otherwise.
	OldMode string
}

// Result is the outcome of applying patches in memory. Nothing is written.
type Result struct {
	Files []*FileResult // sorted by path
	Hunks []HunkResult  // in application order
	// Notes say what the built-in gate rule could not check on this
	// machine (CheckResult), for the command to print.
	Notes []string
}

// Offsets returns the hunks that landed away from where their header said.
func (r *Result) Offsets() []HunkResult {
	var out []HunkResult
	for _, h := range r.Hunks {
		if h.Offset != 0 {
			out = append(out, h)
		}
	}
	return out
}

// ErrFileExists and ErrFileMissing classify a file-level conflict.
var (
	ErrFileExists  = errors.New("file already exists")
	ErrFileMissing = errors.New("file does not exist")
	// ErrNotADirectory is a file created or edited under a path that is a
	// file (git apply: "Not a directory", ENOTDIR).
	ErrNotADirectory = errors.New("not a directory")
)

// underFile returns the first parent directory of path that is a file
// in the tree the series has made so far or in its base (a file the
// series deletes included: it has no directory in its place), or "".
func (o *overlay) underFile(path string) string {
	for i := strings.IndexByte(path, '/'); i >= 0; i = next(path, i) {
		a := path[:i]
		if e, ok := o.cur[a]; ok && e.exists {
			return a
		}
		if _, err := o.base.ReadFile(a); err == nil {
			return a
		}
	}
	return ""
}

// next is the index of the '/' after i in path, or -1.
func next(path string, i int) int {
	j := strings.IndexByte(path[i+1:], '/')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// FileError is a conflict on a whole file: a created file that exists, or a
// modified or deleted one that does not.
type FileError struct {
	Patch string
	Path  string
	Op    Op
	Err   error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("patch %s: cannot %s %s: %v", e.Patch, e.Op, e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

type entry struct {
	data   []byte
	exists bool
	// mode is a created file's mode, or the mode a patch set on a kept
	// file; "" when no patch said. oldMode is the mode the first such
	// patch said the file had.
	mode, oldMode string
}

// overlay is a copy-on-write view of a Tree.
type overlay struct {
	base  Tree
	cur   map[string]*entry
	orig  map[string]*entry
	order []string
}

func newOverlay(base Tree) *overlay {
	return &overlay{base: base, cur: map[string]*entry{}, orig: map[string]*entry{}}
}

func (o *overlay) get(path string) (*entry, error) {
	if e, ok := o.cur[path]; ok {
		return e, nil
	}
	data, err := o.base.ReadFile(path)
	e := &entry{data: data, exists: true}
	if errors.Is(err, fs.ErrNotExist) {
		e = &entry{}
	} else if err != nil {
		return nil, err
	}
	o.cur[path] = e
	o.orig[path] = e
	o.order = append(o.order, path)
	return e, nil
}

func (o *overlay) set(path string, e *entry) { o.cur[path] = e }

// snapshot lets a failed patch be rolled back inside Check.
func (o *overlay) snapshot() map[string]*entry {
	m := make(map[string]*entry, len(o.cur))
	for k, v := range o.cur {
		m[k] = v
	}
	return m
}

func (o *overlay) result() *Result {
	r := &Result{}
	paths := append([]string(nil), o.order...)
	sort.Strings(paths)
	for _, p := range paths {
		before, after := o.orig[p], o.cur[p]
		if before == after {
			continue
		}
		modeChanged := after.oldMode != "" && after.mode != after.oldMode
		if before.exists == after.exists && string(before.data) == string(after.data) && !modeChanged {
			continue
		}
		fr := &FileResult{Path: p, Op: Modify, Mode: after.mode}
		if modeChanged && before.exists && after.exists {
			fr.OldMode = after.oldMode
		} else if before.exists && after.exists {
			fr.Mode = ""
		}
		if before.exists {
			fr.Before = before.data
		} else {
			fr.Op = Create
		}
		if after.exists {
			fr.After = after.data
			if after.data == nil {
				fr.After = []byte{}
			}
		} else {
			fr.Op = Delete
		}
		r.Files = append(r.Files, fr)
	}
	return r
}

// applyPatch applies one patch to the overlay; on error the overlay may hold
// part of it, so callers snapshot first.
func applyPatch(o *overlay, p *Patch, d *Diff) ([]HunkResult, error) {
	var all []HunkResult
	for _, fc := range d.Changes {
		if a := o.underFile(fc.Path); a != "" && fc.Op != Delete {
			return nil, &FileError{Patch: p.Name, Path: fc.Path, Op: fc.Op, Err: fmt.Errorf("%w: %s is a file", ErrNotADirectory, a)}
		}
		e, err := o.get(fc.Path)
		if err != nil {
			return nil, fmt.Errorf("patch %s: reading %s: %w", p.Name, fc.Path, err)
		}
		switch fc.Op {
		case Create:
			if e.exists {
				return nil, &FileError{Patch: p.Name, Path: fc.Path, Op: Create, Err: ErrFileExists}
			}
			var lines []string
			if len(fc.Hunks) == 1 {
				lines = fc.Hunks[0].New
			}
			o.set(fc.Path, &entry{data: joinLines(lines), exists: true, mode: fc.Mode})
			if len(fc.Hunks) == 1 {
				// At line 1 of the empty file, whatever its header says:
				// "@@ -1,0 +2,1 @@" is offset -1, as git apply reports it.
				all = append(all, HunkResult{Patch: p.Name, Path: fc.Path, Hunk: fc.Hunks[0].Header, Line: 1, Offset: -headerPos(fc.Hunks[0])})
			}
		case Delete, Modify:
			if !e.exists {
				return nil, &FileError{Patch: p.Name, Path: fc.Path, Op: fc.Op, Err: ErrFileMissing}
			}
			if err := checkModeClaim(o, e, p.Name, fc); err != nil {
				return nil, err
			}
			if fc.Op == Delete && len(fc.Hunks) == 0 && len(e.data) > 0 {
				return nil, &ConflictError{Patch: p.Name, Path: fc.Path, Hunk: "(no hunk: an empty file)", Line: 1,
					Found: splitLines(e.data), Reason: "the file to delete holds more than the patch lists"}
			}
			if fc.Op == Delete && len(fc.Hunks) > 0 {
				// A deletion lists the whole file; git apply refuses one
				// that leaves contents ("removal patch leaves file
				// contents").
				old := fc.Hunks[0].Old
				if have := splitLines(e.data); len(have) > len(old) && slices.Equal(have[:len(old)], old) {
					return nil, &ConflictError{Patch: p.Name, Path: fc.Path, Hunk: fc.Hunks[0].Header, Line: 1,
						Expected: old, Found: have, Reason: "the file to delete holds more than the patch lists"}
				}
			}
			out, res, err := applyHunks(p.Name, fc.Path, e.data, fc.Hunks)
			if err != nil {
				return nil, err
			}
			if fc.Op == Delete {
				o.set(fc.Path, &entry{})
			} else {
				ne := &entry{data: out, exists: true, mode: e.mode, oldMode: e.oldMode}
				if fc.NewMode != "" {
					if e.mode != "" && e.mode != fc.OldMode {
						return nil, &FileError{Patch: p.Name, Path: fc.Path, Op: Modify, Err: fmt.Errorf("an earlier patch left mode %s, but this one says old mode %s", e.mode, fc.OldMode)}
					}
					ne.mode = fc.NewMode
					if ne.oldMode == "" {
						ne.oldMode = fc.OldMode
					}
				}
				o.set(fc.Path, ne)
			}
			all = append(all, res...)
		}
	}
	return all, nil
}

// Moder is a Tree that knows its files' git modes ("100644", "100755";
// "" for a missing file), such as a commit's tree. Against one, a patch's
// mode claim is checked.
type Moder interface {
	Mode(path string) string
}

// checkModeClaim refuses a patch whose header says the file has another
// mode than it has: `old mode`, `deleted file mode` and an `index` line's
// mode are one claim (FileChange.ModeClaim). The mode is the one an
// earlier patch of the run left, else the tree's when it is a Moder;
// otherwise it is not known here and the claim is not judged. git apply
// only warns ("has type 100644, expected 100755"); arpatch refuses.
func checkModeClaim(o *overlay, e *entry, patch string, fc *FileChange) error {
	if fc.ModeClaim == "" {
		return nil
	}
	have := e.mode
	if m, ok := o.base.(Moder); ok && have == "" {
		have = m.Mode(fc.Path)
	}
	if have == "" || have == fc.ModeClaim {
		return nil
	}
	return &FileError{Patch: patch, Path: fc.Path, Op: fc.Op, Err: fmt.Errorf("the patch says it has mode %s (%q), but it has %s (git apply would only warn \"has type %s, expected %s\"; arpatch refuses a wrong mode claim in any header)", fc.ModeClaim, fc.ModeClaimBy, have, have, fc.ModeClaim)}
}

// Apply applies the patches in order to an in-memory view of tree and
// returns every file's before and after bytes. It writes nothing. It stops at
// the first patch that does not fit, returning a *ConflictError (a hunk's
// context differs) or a *FileError (a file exists or is missing).
func Apply(tree Tree, patches []*Patch) (*Result, error) {
	o := newOverlay(tree)
	var hunks []HunkResult
	for _, p := range patches {
		res, err := applyPatch(o, p, p.Diff)
		if err != nil {
			return nil, err
		}
		hunks = append(hunks, res...)
	}
	r := o.result()
	r.Hunks = hunks
	return r, nil
}

// Unapply removes the patches from tree in reverse order: it applies each
// patch's reverse diff, so it succeeds exactly when tree holds every patch.
// Errors are as for Apply, with hunk headers of the reversed diff.
func Unapply(tree Tree, patches []*Patch) (*Result, error) {
	o := newOverlay(tree)
	var hunks []HunkResult
	for i := len(patches) - 1; i >= 0; i-- {
		p := patches[i]
		res, err := applyPatch(o, p, p.Diff.Reverse())
		if err != nil {
			return nil, err
		}
		hunks = append(hunks, res...)
	}
	r := o.result()
	r.Hunks = hunks
	return r, nil
}

// Reverse returns the diff that undoes d.
func (d *Diff) Reverse() *Diff {
	r := &Diff{Header: d.Header}
	for _, fc := range d.Changes {
		rc := &FileChange{Path: fc.Path, Op: fc.Op, Mode: fc.Mode, OldMode: fc.NewMode, NewMode: fc.OldMode}
		switch fc.Op {
		case Create:
			rc.Op = Delete
		case Delete:
			rc.Op = Create
		}
		for _, h := range fc.Hunks {
			rc.Hunks = append(rc.Hunks, &Hunk{
				Header:    fmt.Sprintf("@@ -%s +%s @@ (reversed)", HunkRange(h.NewStart, h.NewLines), HunkRange(h.OrigStart, h.OrigLines)),
				OrigStart: h.NewStart, OrigLines: h.NewLines,
				NewStart: h.OrigStart, NewLines: h.OrigLines,
				Old: h.New, New: h.Old,
				Leading: h.Leading, Trailing: h.Trailing,
			})
		}
		r.Changes = append(r.Changes, rc)
	}
	return r
}

// Fit says how one patch relates to a tree.
type Fit int

const (
	// FitExact: every hunk matches where its header says.
	FitExact Fit = iota
	// FitOffset: every hunk matches exactly, some at other lines.
	FitOffset
	// FitApplied: the patch does not apply but its reverse does: the tree
	// already holds it (upstream merged it, or it was applied before).
	FitApplied
	// FitConflict: neither the patch nor its reverse applies.
	FitConflict
)

// String is the fit's word, the one Verdict gives a series of patches
// that all fit so.
func (f Fit) String() string { return string(f.Verdict()) }

// Verdict is the fit's word as a series verdict ("exact", "offset",
// "applied", "conflict"), as the drift history stores it.
func (f Fit) Verdict() SeriesVerdict {
	return [...]SeriesVerdict{VerdictExact, VerdictOffset, VerdictApplied, VerdictConflict}[f]
}

// PatchFit is the result of checking one patch.
type PatchFit struct {
	Patch string
	Fit   Fit
	Hunks []HunkResult // where each hunk landed (FitExact, FitOffset)
	Err   error        // why it does not apply (FitConflict)
}

// MaxOffset returns the largest absolute hunk offset in lines.
func (p PatchFit) MaxOffset() int {
	m := 0
	for _, h := range p.Hunks {
		o := h.Offset
		if o < 0 {
			o = -o
		}
		if o > m {
			m = o
		}
	}
	return m
}

// Check reports, for each patch in order, whether it applies to tree after
// the patches before it. A patch that conflicts is skipped and the next one
// is checked against the tree without it, so one conflict does not hide the
// state of the rest. It writes nothing and returns no error of its own: read
// errors show up as conflicts.
func Check(tree Tree, patches []*Patch) []PatchFit {
	o := newOverlay(tree)
	var out []PatchFit
	for _, p := range patches {
		snap := o.snapshot()
		res, err := applyPatch(o, p, p.Diff)
		if err == nil {
			pf := PatchFit{Patch: p.Name, Fit: FitExact, Hunks: res}
			for _, h := range res {
				if h.Offset != 0 {
					pf.Fit = FitOffset
				}
			}
			out = append(out, pf)
			continue
		}
		o.cur = snap
		// Does the tree already hold it?
		probe := newOverlay(overlayTree{o})
		if _, rerr := applyPatch(probe, p, p.Diff.Reverse()); rerr == nil {
			out = append(out, PatchFit{Patch: p.Name, Fit: FitApplied})
			continue
		}
		out = append(out, PatchFit{Patch: p.Name, Fit: FitConflict, Err: err})
	}
	return out
}

// SeriesVerdict is how a series fits a tree, in one word (Verdict): what
// `patches check`, status and the nightly's drift check report per series
// and commit.
type SeriesVerdict string

// Series verdicts.
const (
	VerdictExact    SeriesVerdict = "exact"    // every hunk where its header says
	VerdictOffset   SeriesVerdict = "offset"   // every hunk exact, some at other lines
	VerdictApplied  SeriesVerdict = "applied"  // the tree already holds every patch
	VerdictPartial  SeriesVerdict = "partial"  // the tree holds some patches, not others
	VerdictConflict SeriesVerdict = "conflict" // a patch applies neither way
)

// Verdict folds per-patch fits into one word: VerdictConflict if any patch
// conflicts, VerdictApplied if the tree holds every patch, VerdictPartial
// if it holds some, VerdictOffset if any hunk moved, else VerdictExact.
func Verdict(fits []PatchFit) SeriesVerdict {
	applied, offset := 0, 0
	for _, f := range fits {
		switch f.Fit {
		case FitConflict:
			return VerdictConflict
		case FitApplied:
			applied++
		case FitOffset:
			offset++
		}
	}
	switch {
	case applied == len(fits) && applied > 0:
		return VerdictApplied
	case applied > 0:
		return VerdictPartial
	case offset > 0:
		return VerdictOffset
	}
	return VerdictExact
}

// overlayTree reads through an overlay's current state.
type overlayTree struct{ o *overlay }

func (t overlayTree) ReadFile(path string) ([]byte, error) {
	e, err := t.o.get(path)
	if err != nil {
		return nil, err
	}
	if !e.exists {
		return nil, fs.ErrNotExist
	}
	return e.data, nil
}
