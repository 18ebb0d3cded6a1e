package patches

import (
	"fmt"
	"strings"
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

// matchAt reports whether want matches lines exactly at position pos.
func matchAt(lines []string, want []string, pos int) bool {
	if pos < 0 || pos+len(want) > len(lines) {
		return false
	}
	for i, w := range want {
		if lines[pos+i] != w {
			return false
		}
	}
	return true
}

// locate finds where old matches lines exactly at or after line min, trying
// the expected position first and then ever larger offsets on both sides, as
// patch(1) does, but without fuzz: every context line must match. It returns
// the 0-based position and true, or -1 and false. A hunk without old lines (a
// pure insertion) must sit exactly at its expected position.
func locate(lines []string, old []string, expect, min int) (int, bool) {
	if expect < min {
		expect = min
	}
	if len(old) == 0 {
		return expect, expect <= len(lines)
	}
	max := len(lines) - len(old)
	for d := 0; ; d++ {
		lo, hi := expect-d, expect+d
		if lo < min && hi > max {
			return -1, false
		}
		if lo >= min && matchAt(lines, old, lo) {
			return lo, true
		}
		if d > 0 && matchAt(lines, old, hi) {
			return hi, true
		}
	}
}

// HunkResult says where one hunk landed.
type HunkResult struct {
	Patch  string `json:"patch"`  // patch file name
	Path   string `json:"path"`   // file the hunk changed
	Hunk   string `json:"hunk"`   // hunk header, e.g. "@@ -471,7 +471,8 @@"
	Line   int    `json:"line"`   // 1-based line of the hunk's first old line in the file as found
	Offset int    `json:"offset"` // lines from where the header said; 0 for an exact fit
}

// applyHunks applies hunks in order to content. It returns the new content
// and where each hunk landed, or a *ConflictError for the first hunk that
// does not match. Hunks must not overlap and must come in file order.
func applyHunks(patch, path string, content []byte, hunks []*Hunk) ([]byte, []HunkResult, error) {
	lines := splitLines(content)
	out := make([]string, 0, len(lines)+8)
	var results []HunkResult
	cursor := 0 // first line of lines not yet copied to out
	delta := 0  // offset of the previous hunk, carried to the next
	for _, h := range hunks {
		expect := h.OrigStart - 1
		if h.OrigLines == 0 {
			// "@@ -N,0" inserts after line N.
			expect = h.OrigStart
		}
		expect += delta
		pos, ok := locate(lines, h.Old, expect, cursor)
		if !ok {
			return nil, nil, newConflict(patch, path, h, lines, expect)
		}
		out = append(out, lines[cursor:pos]...)
		out = append(out, h.New...)
		cursor = pos + len(h.Old)
		off := pos - (expect - delta)
		delta = off
		results = append(results, HunkResult{Patch: patch, Path: path, Hunk: h.Header, Line: pos + 1, Offset: off})
	}
	out = append(out, lines[cursor:]...)
	// A hunk that drops the last line's newline must be the file's end.
	for i := 0; i < len(out)-1; i++ {
		if !strings.HasSuffix(out[i], "\n") {
			return nil, nil, fmt.Errorf("patch %s: %s: a line without newline would land mid-file; the patch's \"No newline at end of file\" marker does not fit this file", patch, path)
		}
	}
	return joinLines(out), results, nil
}

// ConflictError is a hunk whose old lines are not found in the file.
type ConflictError struct {
	Patch    string   // patch file name
	Path     string   // file in the tree
	Hunk     string   // hunk header
	Line     int      // 1-based line where the hunk was expected
	Expected []string // the hunk's old lines
	Found    []string // the file's lines at Line, as many as Expected
	Reason   string
}

func newConflict(patch, path string, h *Hunk, lines []string, expect int) *ConflictError {
	c := &ConflictError{Patch: patch, Path: path, Hunk: h.Header, Line: expect + 1, Expected: h.Old, Reason: "context does not match"}
	if expect >= len(lines) && len(h.Old) > 0 {
		c.Reason = fmt.Sprintf("context expected past the end of the file (it has %d lines)", len(lines))
	}
	for i := expect; i >= 0 && i < len(lines) && i < expect+len(h.Old); i++ {
		c.Found = append(c.Found, lines[i])
	}
	return c
}

func (c *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "patch %s, hunk %s in %s: %s at line %d, and the context is nowhere else in the file", c.Patch, c.Hunk, c.Path, c.Reason, c.Line)
	first := -1
	for i := range c.Expected {
		if i >= len(c.Found) || c.Found[i] != c.Expected[i] {
			first = i
			break
		}
	}
	if first >= 0 {
		fmt.Fprintf(&b, "\n  first difference at line %d:", c.Line+first)
		fmt.Fprintf(&b, "\n    expected: %s", showLine(c.Expected[first]))
		if first < len(c.Found) {
			fmt.Fprintf(&b, "\n    found:    %s", showLine(c.Found[first]))
		} else {
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
