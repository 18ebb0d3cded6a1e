package patches

import (
	"testing"
)

// FuzzParseApply feeds arbitrary patch text and file content through parse
// and apply. It must never panic. Whenever a patch applies with every hunk
// where its header says (no offset, so no ambiguity about which copy of
// repeated context it took) and its headers agree with each other (each
// new side starts where the old side and the hunks before put it, as git
// diff writes them; git apply, and arpatch, only start the search at the
// new side's line), its reverse must apply to the result at the same
// places and give back the original bytes exactly.
//
//	go test -fuzz FuzzParseApply ./patches
func FuzzParseApply(f *testing.F) {
	f.Add(editFour, base)
	f.Add("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n", "a\nb")
	f.Add("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n one\r\n-two\r\n+TWO\r\n three\r\n", "one\r\ntwo\r\nthree\r\n")
	f.Add("--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+x\n", "")
	f.Add("Description: d\n\n--- a/f\n+++ b/f\n@@ -2,0 +3 @@\n+ins\n", "a\nb\nc\n")
	// Issue 11's failing inputs: end anchoring, ambiguity, a mode header,
	// a created file as "@@ -1,0 +1,1 @@", hunks out of order, a binary
	// patch.
	f.Add("--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n x\n y\n+z\n", "x\ny\nq\n")
	f.Add("--- a/f\n+++ b/f\n@@ -8,5 +8,5 @@\n ctxA\n ctxB\n-target\n+PATCHED\n ctxC\n ctxD\n", "h1\nh2\nctxA\nctxB\ntarget\nctxC\nctxD\nf1\nf2\nf3\nf4\nf5\nctxA\nctxB\ntarget\nctxC\nctxD\ntail\n")
	f.Add("diff --git a/f b/f\nnew mode 100755\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n", "a\n")
	f.Add("diff --git a/f b/f\nnew file mode 100644\n--- /dev/null\n+++ b/f\n@@ -1,0 +1,1 @@\n+x\n", "")
	f.Add("--- a/f\n+++ b/f\n@@ -3,1 +3,1 @@\n-c\n+C\n@@ -1,1 +1,1 @@\n-a\n+A\n", "a\nb\nc\n")
	f.Add("diff --git a/f b/f\nindex 1..2 100644\nGIT binary patch\nliteral 11\nScmYdPEy(ONc*=J)000\n\n", "a\n")
	f.Fuzz(func(t *testing.T, patch, content string) {
		d, err := ParseDiff("0001-fuzz.patch", []byte(patch))
		if err != nil {
			return
		}
		tree := memTree{}
		for _, fc := range d.Changes {
			if fc.Op != Create {
				tree[fc.Path] = content
			}
		}
		p := &Patch{Name: "0001-fuzz.patch", Diff: d}
		res, err := Apply(tree, []*Patch{p})
		if err != nil {
			return
		}
		if len(res.Offsets()) > 0 || !consistentHeaders(d) {
			return
		}
		after := withResult(tree, res)
		back, err := Unapply(after, []*Patch{p})
		if err != nil {
			t.Fatalf("patch applied but its reverse does not: %v", err)
		}
		if len(back.Offsets()) > 0 {
			t.Fatalf("an exact patch's reverse landed elsewhere: %+v", back.Offsets())
		}
		restored := withResult(after, back)
		for k, v := range tree {
			if restored[k] != v {
				t.Fatalf("%s: round trip gave %q, want %q", k, restored[k], v)
			}
		}
		if len(restored) != len(tree) {
			t.Fatalf("round trip left %d files, want %d", len(restored), len(tree))
		}
	})
}

// consistentHeaders reports whether every hunk's new start follows from
// its old start and the hunks before it, as diff writes it.
func consistentHeaders(d *Diff) bool {
	for _, fc := range d.Changes {
		delta := 0
		for _, h := range fc.Hunks {
			first := h.OrigStart
			if h.OrigLines == 0 {
				first++
			}
			want := first + delta
			if h.NewLines == 0 {
				want--
			}
			if h.NewStart != want && !(fc.Op == Create && h.NewStart == 1) {
				return false
			}
			delta += h.NewLines - h.OrigLines
		}
	}
	return true
}
