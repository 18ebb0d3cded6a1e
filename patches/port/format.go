package port

import (
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/arpatch/arpatch/internal/merge3"
	"github.com/arpatch/arpatch/patches"
)

// context is the number of unchanged lines around a change in a
// regenerated hunk, as git diff's default -U3.
const context = 3

// lines splits content into lines that keep their newline.
var lines = patches.SplitLines

// reheader gives each hunk the position Apply found for it at the target:
// the old side starts where its old lines were found, the new side there
// plus the lines the earlier hunks added.
func reheader(hunks []*patches.Hunk, at []patches.HunkResult) []*patches.Hunk {
	out := make([]*patches.Hunk, len(hunks))
	delta := 0
	for i, h := range hunks {
		c := *h
		c.OrigStart = at[i].Line
		if c.OrigLines == 0 {
			c.OrigStart = at[i].Line - 1 // "-N,0" inserts after line N
		}
		c.NewStart = c.OrigStart + delta
		if c.OrigLines == 0 {
			c.NewStart++
		}
		if c.NewLines == 0 {
			c.NewStart--
		}
		delta += c.NewLines - c.OrigLines
		out[i] = &c
	}
	return out
}

// unified returns the hunks that turn a into b, with context lines of
// context and changes at most 2*context unchanged lines apart in one hunk,
// as git diff groups them (xdiff's xdl_get_hunk).
func unified(a, b []string) []*patches.Hunk {
	edits := merge3.Diff(a, b)
	var out []*patches.Hunk
	for i := 0; i < len(edits); {
		j := i
		for j+1 < len(edits) && edits[j+1].BaseStart-edits[j].BaseEnd <= 2*context {
			j++
		}
		first, last := edits[i], edits[j]
		as := max(0, first.BaseStart-context)
		ae := min(len(a), last.BaseEnd+context)
		bs := first.SideStart - (first.BaseStart - as)
		be := last.SideEnd + (ae - last.BaseEnd)
		h := &patches.Hunk{OrigStart: as + 1, OrigLines: ae - as, NewStart: bs + 1, NewLines: be - bs, Old: a[as:ae], New: b[bs:be]}
		if h.OrigLines == 0 {
			h.OrigStart = as
		}
		if h.NewLines == 0 {
			h.NewStart = bs
		}
		out = append(out, h)
		i = j + 1
	}
	return out
}

// section renders one file's part of a patch, as git diff writes it:
// "diff --git", the mode lines, the index line with both blobs' hashes
// (and the mode of a kept file), the file headers and the hunks, each
// with its function context. mode is the file's mode at the target
// ("" for 100644).
func section(path string, f *patches.FileResult, before []byte, hunks []*patches.Hunk, mode string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\n", path, path)
	oldHash, newHash := blob(before), blob(f.After)
	switch {
	case f.Op == patches.Create:
		fmt.Fprintf(&b, "new file mode %s\nindex 000000000..%s\n--- /dev/null\n+++ b/%s\n", orMode(f.Mode), newHash, path)
	case f.Op == patches.Delete:
		fmt.Fprintf(&b, "deleted file mode %s\nindex %s..000000000\n--- a/%s\n+++ /dev/null\n", orMode(mode), oldHash, path)
	case f.OldMode != "":
		fmt.Fprintf(&b, "old mode %s\nnew mode %s\n", f.OldMode, f.Mode)
		if len(hunks) > 0 {
			fmt.Fprintf(&b, "index %s..%s\n--- a/%s\n+++ b/%s\n", oldHash, newHash, path, path)
		}
	default:
		fmt.Fprintf(&b, "index %s..%s %s\n--- a/%s\n+++ b/%s\n", oldHash, newHash, orMode(mode), path, path)
	}
	old := lines(before)
	for _, h := range hunks {
		writeHunk(&b, h, old)
	}
	return b.String()
}

func orMode(m string) string {
	if m == "" {
		return "100644"
	}
	return m
}

// blob is the abbreviated git blob hash of data, as an index line shows it.
func blob(data []byte) string {
	return plumbing.ComputeHash(plumbing.BlobObject, data).String()[:9]
}

// writeHunk writes a hunk: its header with git's default function
// context, then its lines, a change's removed lines before its added ones.
func writeHunk(b *strings.Builder, h *patches.Hunk, old []string) {
	fmt.Fprintf(b, "@@ -%s +%s @@", patches.HunkRange(h.OrigStart, h.OrigLines), patches.HunkRange(h.NewStart, h.NewLines))
	s1 := h.OrigStart - 1
	if h.OrigLines == 0 {
		s1 = h.OrigStart
	}
	if fn := funcLine(old, s1-1); fn != "" {
		b.WriteString(" " + fn)
	}
	b.WriteString("\n")
	emit := func(prefix, l string) {
		b.WriteString(prefix + l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n\\ No newline at end of file\n")
		}
	}
	pos := 0
	for _, e := range merge3.Diff(h.Old, h.New) {
		for ; pos < e.BaseStart; pos++ {
			emit(" ", h.Old[pos])
		}
		for _, l := range h.Old[e.BaseStart:e.BaseEnd] {
			emit("-", l)
		}
		for _, l := range h.New[e.SideStart:e.SideEnd] {
			emit("+", l)
		}
		pos = e.BaseEnd
	}
	for ; pos < len(h.Old); pos++ {
		emit(" ", h.Old[pos])
	}
}

// funcLine is git's default function context (xdiff's def_ff): the
// nearest line at or before index from that starts with a letter, '_' or
// '$', cut to 80 bytes, trailing whitespace removed.
func funcLine(ls []string, from int) string {
	for i := min(from, len(ls)-1); i >= 0; i-- {
		l := ls[i]
		if l == "" {
			continue
		}
		c := l[0]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$' {
			if len(l) > 80 {
				l = l[:80]
			}
			return strings.TrimRight(l, " \t\r\n\v\f")
		}
	}
	return ""
}
