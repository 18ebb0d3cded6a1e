package patches

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/arpatch/arpatch/internal/textfmt"
)

// splitLines splits content into lines that keep their "\n" (and any "\r"
// before it); the last line has no newline when the content does not end in
// one. Joining the result gives content back byte for byte.
func splitLines(content []byte) []string {
	var lines []string
	s := string(content)
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			lines = append(lines, s)
			break
		}
		lines = append(lines, s[:i+1])
		s = s[i+1:]
	}
	return lines
}

func joinLines(lines []string) []byte {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	b := make([]byte, 0, n)
	for _, l := range lines {
		b = append(b, l...)
	}
	return b
}

// HunkResult says where one hunk landed.
type HunkResult struct {
	Patch  string `json:"patch"`  // patch file name
	Path   string `json:"path"`   // file the hunk changed
	Hunk   string `json:"hunk"`   // hunk header, e.g. "@@ -471,7 +471,8 @@"
	Line   int    `json:"line"`   // 1-based line of the hunk's first old line in the file as found
	Offset int    `json:"offset"` // lines from where the header said; 0 for an exact fit
}

// image is a file being patched, hunk by hunk, as git apply holds it: its
// current lines, and for each whether an earlier hunk wrote it (a later
// hunk may not match a line an earlier one produced, so hunks never
// overlap).
type image struct {
	lines   []string
	patched []bool
}

// placement is the rule set one hunk is placed by, as git apply places it
// (apply.c, apply_one_fragment and match_fragment, without --unidiff-zero,
// -C or whitespace options):
//   - beginning: a hunk whose old side starts at line 0 or 1 must match at
//     the first line of the file;
//   - end: a hunk with no context after its last change must match at the
//     end of the file;
//   - every old line must equal the file's line byte for byte (no fuzz, no
//     whitespace folding), and none may be a line an earlier hunk of the
//     same file wrote.
//
// The header's own position is tried first. Where the hunk does not fit
// there, git takes the nearest fit; arpatch takes a fit elsewhere only when
// it is the only one, and refuses when there are several (see
// ConflictError.Candidates).
type placement struct {
	old            []string
	beginning, end bool
	header         int // 0-based line the header names in the current image: where the search starts
}

// headerPos is the 0-based line a hunk's header says it lands at, from
// which HunkResult.Offset counts, whatever anchors its search: the new
// side's start less one ("+0": 0), as git apply counts its offsets
// (Upstream: git apply.c@v2.39.5 (apply_one_fragment: pos =
// frag->newpos ? (frag->newpos - 1) : 0; offset = applied_pos - pos)), a
// hunk anchored at the first line and a new file's hunk included
// ("@@ -1,0 +2,1 @@" is offset -1, as git says). One deliberate
// difference: for an empty new side past the first line ("-M +N,0" with
// M > 1, N > 0: the hunk's lines went after line N) it is N, where git
// takes N-1 and so reports offset 1 for its own exact -U0 diff of a
// deletion; arpatch reports 0 there, one less than git for every such
// hunk (TestOffsetsAgainstGitApply).
func headerPos(h *Hunk) int {
	if emptyNewAfter(h) {
		return h.NewStart
	}
	return max(h.NewStart-1, 0)
}

// emptyNewAfter reports a hunk whose new side is empty and names the line
// after which it sits ("+N,0", N > 0), away from the first line (which
// git anchors at the file's start).
func emptyNewAfter(h *Hunk) bool { return h.NewLines == 0 && h.NewStart > 0 && h.OrigStart > 1 }

func newPlacement(h *Hunk) placement {
	p := placement{
		old:       h.Old,
		beginning: h.OrigStart <= 1,
		end:       h.Trailing == 0,
	}
	if h.NewStart > 0 {
		p.header = h.NewStart - 1
	}
	if h.NewLines == 0 {
		// "+N,0" names the line after which the hunk's (empty) new side
		// sits, as "-N,0" does for the old side. git apply starts its
		// search one line earlier; such a hunk has no context, so it is
		// anchored at an end either way, and only the offset reported
		// differs.
		p.header = h.NewStart
	}
	if p.beginning {
		// git apply searches such a hunk at the first line only.
		p.header = 0
	}
	return p
}

// fits reports whether the hunk's old lines can be placed at line pos of
// img under the anchoring rules.
func (p placement) fits(img *image, pos int, anchored bool) bool {
	n := len(img.lines)
	if pos < 0 || pos+len(p.old) > n {
		return false
	}
	if anchored {
		if p.beginning && pos != 0 {
			return false
		}
		if p.end && pos+len(p.old) != n {
			return false
		}
	}
	for i, w := range p.old {
		if img.patched[pos+i] || img.lines[pos+i] != w {
			return false
		}
	}
	return true
}

// candidates lists every line (0-based) where the hunk fits.
func (p placement) candidates(img *image, anchored bool) []int {
	var out []int
	for pos := 0; pos+len(p.old) <= len(img.lines); pos++ {
		if p.fits(img, pos, anchored) {
			out = append(out, pos)
		}
	}
	return out
}

// applyHunks applies hunks in order to content, placing each by git apply's
// rules (see placement). It returns the new content and where each hunk
// landed, or a *ConflictError for the first hunk that does not fit or fits
// at more than one place other than its header's.
func applyHunks(patch, path string, content []byte, hunks []*Hunk) ([]byte, []HunkResult, error) {
	lines := splitLines(content)
	img := &image{lines: lines, patched: make([]bool, len(lines))}
	var results []HunkResult
	for _, h := range hunks {
		p := newPlacement(h)
		pos := p.header
		if !p.fits(img, pos, true) {
			cands := p.candidates(img, true)
			switch len(cands) {
			case 0:
				return nil, nil, newConflict(patch, path, h, img, p)
			case 1:
				pos = cands[0]
			default:
				c := newConflict(patch, path, h, img, p)
				c.Reason = "context does not match"
				for _, x := range cands {
					c.Candidates = append(c.Candidates, x+1)
				}
				return nil, nil, c
			}
		}
		img.replace(pos, len(h.Old), h.New)
		line := h.OrigStart + pos - p.header
		if h.OrigLines == 0 {
			line++
		}
		results = append(results, HunkResult{Patch: patch, Path: path, Hunk: h.Header, Line: line, Offset: pos - headerPos(h)})
	}
	// A hunk that drops the last line's newline must be the file's end.
	for i := 0; i < len(img.lines)-1; i++ {
		if !strings.HasSuffix(img.lines[i], "\n") {
			return nil, nil, fmt.Errorf("patch %s: %s: a line without newline would land mid-file; the patch's \"No newline at end of file\" marker does not fit this file", patch, path)
		}
	}
	return joinLines(img.lines), results, nil
}

// replace puts repl in place of the n lines at pos and marks them written.
func (img *image) replace(pos, n int, repl []string) {
	lines := make([]string, 0, len(img.lines)-n+len(repl))
	lines = append(append(append(lines, img.lines[:pos]...), repl...), img.lines[pos+n:]...)
	patched := make([]bool, 0, len(lines))
	patched = append(patched, img.patched[:pos]...)
	for range repl {
		patched = append(patched, true)
	}
	patched = append(patched, img.patched[pos+n:]...)
	img.lines, img.patched = lines, patched
}

// ConflictError is a hunk that does not fit: its old lines are nowhere in
// the file where git apply's placement rules allow them, or they fit at
// several places other than the header's line (Candidates), and arpatch
// will not choose one.
type ConflictError struct {
	Patch    string   // patch file name
	Path     string   // file in the tree
	Hunk     string   // hunk header
	Line     int      // 1-based line where the hunk was expected
	Expected []string // the hunk's old lines
	Found    []string // the file's lines at Line, as many as Expected
	Reason   string
	// Candidates, when not empty, lists the 1-based lines (of the file
	// as the earlier hunks of this patch left it) where the hunk fits
	// equally well: the placement is ambiguous.
	Candidates []int
	// Anchored says where the hunk fits only when git apply's
	// beginning/end rule is set aside: the 1-based lines, or none.
	Anchored []int
}

// Ambiguous reports whether the hunk fits at more than one place.
func (c *ConflictError) Ambiguous() bool { return len(c.Candidates) > 1 }

func newConflict(patch, path string, h *Hunk, img *image, p placement) *ConflictError {
	expect := p.header
	if p.beginning {
		expect = 0
	} else if p.end {
		expect = len(img.lines) - len(h.Old)
		if expect < 0 {
			expect = 0
		}
	}
	c := &ConflictError{Patch: patch, Path: path, Hunk: h.Header, Line: expect + 1, Expected: h.Old, Reason: "context does not match"}
	if expect >= len(img.lines) && len(h.Old) > 0 {
		c.Reason = fmt.Sprintf("context expected past the end of the file (it has %d lines)", len(img.lines))
	}
	for i := expect; i >= 0 && i < len(img.lines) && i < expect+len(h.Old); i++ {
		c.Found = append(c.Found, img.lines[i])
	}
	for _, x := range p.candidates(img, false) {
		c.Anchored = append(c.Anchored, x+1)
	}
	if len(c.Anchored) > 0 {
		c.Reason = anchorReason(path, h, img, p, c.Anchored)
	}
	return c
}

// anchorReason says which of git apply's anchoring rules a hunk breaks
// whose lines are in the file (at the 1-based lines at) but not where
// the rule puts them, naming the line of the file that breaks it.
func anchorReason(path string, h *Hunk, img *image, p placement, at []int) string {
	n, k := len(img.lines), len(h.Old)
	quote := func(l string) string { return "`" + showLine(l) + "`" }
	first, last := at[0]-1, at[len(at)-1]-1
	lines := fmt.Sprintf("line %d", first+1)
	if len(at) > 1 {
		lines = "lines " + textfmt.Ints(at, ", ")
	}
	switch {
	case k == 0:
		// No context and nothing removed: "-0,0" names an empty file.
		return fmt.Sprintf("the hunk has no context and removes nothing, and its old side is at line %d (-%d,0), so it must be the whole file: it applies only to an empty file, and %s has %d lines. To add lines to a file, give the hunk context (git diff -U3)",
			h.OrigStart, h.OrigStart, path, n)
	case p.beginning && first != 0:
		return fmt.Sprintf("the hunk's old side starts at line %d (-%d,%d), so it must match at the beginning of the file; its lines are at %s, but the file starts with %s at line 1",
			h.OrigStart, h.OrigStart, h.OrigLines, lines, quote(img.lines[0]))
	case p.end && last+k != n:
		return fmt.Sprintf("the hunk has no context after its last change, so it must match at the end of the file; its lines are at %s, but the file goes on with %s at line %d",
			lines, quote(img.lines[last+k]), last+k+1)
	}
	return "context does not match"
}

func (c *ConflictError) Error() string {
	var b strings.Builder
	switch {
	case c.Ambiguous():
		fmt.Fprintf(&b, "patch %s, hunk %s in %s: %s at line %d, and it fits equally at lines %s; arpatch does not choose between copies of repeated code. Regenerate the patch with more context (git diff -U5) against this commit",
			c.Patch, c.Hunk, c.Path, c.Reason, c.Line, textfmt.Ints(c.Candidates, ", "))
	case len(c.Anchored) > 0:
		// The lines match where they are; only the anchoring rule
		// fails, and the reason names the line that breaks it.
		fmt.Fprintf(&b, "patch %s, hunk %s in %s: %s (git apply refuses it too)", c.Patch, c.Hunk, c.Path, c.Reason)
		return b.String()
	default:
		fmt.Fprintf(&b, "patch %s, hunk %s in %s: %s at line %d, and the context is nowhere else in the file", c.Patch, c.Hunk, c.Path, c.Reason, c.Line)
	}
	first := -1
	for i := range c.Expected {
		if i >= len(c.Found) || c.Found[i] != c.Expected[i] {
			first = i
			break
		}
	}
	if first >= 0 {
		fmt.Fprintf(&b, "\n  first difference at line %d:", c.Line+first)
		if first < len(c.Found) {
			w, g := showPair(c.Expected[first], c.Found[first])
			fmt.Fprintf(&b, "\n    expected: %s", w)
			fmt.Fprintf(&b, "\n    found:    %s", g)
		} else {
			fmt.Fprintf(&b, "\n    expected: %s", showLine(c.Expected[first]))
			b.WriteString("\n    found:    (end of file)")
		}
	}
	b.WriteString("\n  expected lines:")
	for _, l := range c.Expected {
		b.WriteString("\n    | " + showLine(l))
	}
	b.WriteString("\n  found lines:")
	for _, l := range c.Found {
		b.WriteString("\n    | " + showLine(l))
	}
	return b.String()
}

// showLine prints a line without its newline, making a CR or a missing
// newline visible.
func showLine(l string) string {
	s := strings.TrimSuffix(l, "\n")
	suffix := ""
	if strings.HasSuffix(s, "\r") {
		s = strings.TrimSuffix(s, "\r")
		suffix = " [CRLF]"
	}
	if !strings.HasSuffix(l, "\n") {
		suffix += " [no newline at end of file]"
	}
	return s + suffix
}

// showPair prints an expected and a found line. When they would print the
// same (they differ only in whitespace or invisible bytes), every space,
// tab, CR and control byte is made visible: a space as "·", a tab as
// "[TAB]", a CR as "[CR]", others as Go escapes.
func showPair(want, got string) (string, string) {
	w, g := showLine(want), showLine(got)
	if inked(w) != inked(g) {
		return w, g
	}
	return visible(want), visible(got)
}

// inked drops what prints as blank: spaces, tabs, control and other
// non-printing characters.
func inked(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, s)
}

func visible(l string) string {
	s := strings.TrimSuffix(l, "\n")
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == ' ':
			b.WriteString("·")
		case r == '\t':
			b.WriteString("[TAB]")
		case r == '\r':
			b.WriteString("[CR]")
		case unicode.IsSpace(r) || !unicode.IsPrint(r):
			fmt.Fprintf(&b, "%+q", string(r))
		default:
			b.WriteRune(r)
		}
	}
	if !strings.HasSuffix(l, "\n") {
		b.WriteString(" [no newline at end of file]")
	}
	return b.String() + " (whitespace shown: · space)"
}
