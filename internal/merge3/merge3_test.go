package merge3

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/merge3/merge3test"
	"github.com/arpatch/arpatch/patches"
)

func lines(s string) []string { return patches.SplitLines([]byte(s)) }

func TestMergeCases(t *testing.T) {
	base := "a\nb\nc\nd\ne\nf\ng\n"
	for _, tc := range []struct {
		name, ours, theirs string
		want               string // merged text when clean
		conflict           *Conflict
	}{
		{name: "ours only", ours: "a\nB\nc\nd\ne\nf\ng\n", theirs: base, want: "a\nB\nc\nd\ne\nf\ng\n"},
		{name: "theirs only", ours: base, theirs: "x\na\nb\nc\nd\ne\nf\ng\n", want: "x\na\nb\nc\nd\ne\nf\ng\n"},
		{name: "apart", ours: "a\nB\nc\nd\ne\nf\ng\n", theirs: "a\nb\nc\nd\nE\nf\ng\nh\n", want: "a\nB\nc\nd\nE\nf\ng\nh\n"},
		{name: "one unchanged line between", ours: "a\nB\nc\nd\ne\nf\ng\n", theirs: "a\nb\nc\nD\ne\nf\ng\n", want: "a\nB\nc\nD\ne\nf\ng\n"},
		{name: "same change both sides", ours: "a\nb\nC\nd\ne\nf\ng\n", theirs: "a\nb\nC\nd\ne\nf\ng\n", want: "a\nb\nC\nd\ne\nf\ng\n"},
		{name: "same insertion both sides", ours: "a\nb\nnew\nc\nd\ne\nf\ng\n", theirs: "a\nb\nnew\nc\nd\ne\nf\ng\n", want: "a\nb\nnew\nc\nd\ne\nf\ng\n"},
		{name: "overlap", ours: "a\nb\nOURS\nd\ne\nf\ng\n", theirs: "a\nb\nTHEIRS\nd\ne\nf\ng\n",
			conflict: &Conflict{BaseStart: 2, BaseEnd: 3, Base: []string{"c\n"}, Ours: []string{"OURS\n"}, Theirs: []string{"THEIRS\n"}}},
		{name: "touching", ours: "a\nb\nC\nd\ne\nf\ng\n", theirs: "a\nb\nc\nD\ne\nf\ng\n",
			conflict: &Conflict{BaseStart: 2, BaseEnd: 4, Base: []string{"c\n", "d\n"}, Ours: []string{"C\n", "d\n"}, Theirs: []string{"c\n", "D\n"}}},
		{name: "two insertions at one point", ours: "a\nb\nc\no\nd\ne\nf\ng\n", theirs: "a\nb\nc\nt\nd\ne\nf\ng\n",
			conflict: &Conflict{BaseStart: 3, BaseEnd: 3, Base: nil, Ours: []string{"o\n"}, Theirs: []string{"t\n"}}},
		{name: "ours deletes what theirs edits", ours: "a\nb\nf\ng\n", theirs: "a\nb\nc\nD\ne\nf\ng\n",
			conflict: &Conflict{BaseStart: 2, BaseEnd: 5, Base: []string{"c\n", "d\n", "e\n"}, Ours: nil, Theirs: []string{"c\n", "D\n", "e\n"}}},
		{name: "no newline at end, ours appends", ours: "a\nb\nc\nd\ne\nf\ng\nh", theirs: "A\nb\nc\nd\ne\nf\ng\n", want: "A\nb\nc\nd\ne\nf\ng\nh"},
		{name: "crlf kept", ours: "a\r\nb\nc\nd\ne\nf\ng\n", theirs: "a\nb\nc\nd\ne\nf\nG\n", want: "a\r\nb\nc\nd\ne\nf\nG\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Merge(lines(base), lines(tc.ours), lines(tc.theirs))
			if tc.conflict == nil {
				if !r.Clean() {
					t.Fatalf("conflicts %+v", r.Conflicts)
				}
				if got := strings.Join(r.Lines, ""); got != tc.want {
					t.Fatalf("merged %q, want %q", got, tc.want)
				}
				return
			}
			if len(r.Conflicts) != 1 {
				t.Fatalf("conflicts %+v, want one", r.Conflicts)
			}
			c := r.Conflicts[0]
			w := *tc.conflict
			if c.BaseStart != w.BaseStart || c.BaseEnd != w.BaseEnd || !slices.Equal(c.Base, w.Base) || !slices.Equal(c.Ours, w.Ours) || !slices.Equal(c.Theirs, w.Theirs) {
				t.Fatalf("conflict %+v, want %+v", c, w)
			}
		})
	}
}

func TestMergeEmptyBase(t *testing.T) {
	r := Merge(nil, lines("x\n"), nil)
	if !r.Clean() || strings.Join(r.Lines, "") != "x\n" {
		t.Fatalf("%+v", r)
	}
	r = Merge(nil, lines("x\n"), lines("y\n"))
	if r.Clean() || len(r.Conflicts[0].Ours) != 1 {
		t.Fatalf("%+v", r)
	}
}

func TestDiffEdits(t *testing.T) {
	got := Diff(lines("a\nb\nc\nd\n"), lines("a\nX\nY\nc\n"))
	want := []Edit{{BaseStart: 1, BaseEnd: 2, SideStart: 1, SideEnd: 3}, {BaseStart: 3, BaseEnd: 4, SideStart: 4, SideEnd: 4}}
	if !slices.Equal(got, want) {
		t.Fatalf("edits %+v, want %+v", got, want)
	}
}

// TestMergeAgainstGitMergeFile merges random edits with Merge and with
// `git merge-file -p` and requires the same verdict (clean or conflict)
// and, when clean, the same bytes.
func TestMergeAgainstGitMergeFile(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed; the differential test against git merge-file needs it")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(10))
	var clean, conflicted int
	for i := 0; i < 300; i++ {
		var base []string
		for j := rng.Intn(12); j > 0; j-- {
			base = append(base, fmt.Sprintf("base %d\n", j))
		}
		ours := merge3test.RandomEdit(rng, base, "ours")
		theirs := merge3test.RandomEdit(rng, base, "theirs")
		if rng.Intn(8) == 0 {
			theirs = slices.Clone(ours) // the same change on both sides
		}
		write := func(name string, l []string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(strings.Join(l, "")), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		cmd := exec.Command(git, "merge-file", "-p", write("ours", ours), write("base", base), write("theirs", theirs))
		out, err := cmd.Output()
		gitConflicts := 0
		if ee, ok := err.(*exec.ExitError); ok {
			gitConflicts = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		// Properties that hold whatever git says: an unchanged side
		// yields the other side.
		if m := Merge(base, base, theirs); !m.Clean() || !slices.Equal(m.Lines, theirs) {
			t.Fatalf("case %d: merging an unchanged ours did not give theirs: %+v", i, m)
		}
		if m := Merge(base, ours, base); !m.Clean() || !slices.Equal(m.Lines, ours) {
			t.Fatalf("case %d: merging an unchanged theirs did not give ours: %+v", i, m)
		}
		r := Merge(base, ours, theirs)
		if r.Clean() != (gitConflicts == 0) {
			t.Fatalf("case %d: Merge clean=%v, git merge-file conflicts=%d\nbase %q\nours %q\ntheirs %q\ngit:\n%s", i, r.Clean(), gitConflicts, base, ours, theirs, out)
		}
		if r.Clean() {
			clean++
			if got := strings.Join(r.Lines, ""); got != string(out) {
				t.Fatalf("case %d: merged %q, git merge-file %q", i, got, out)
			}
		} else {
			conflicted++
		}
	}
	if clean < 50 || conflicted < 50 {
		t.Fatalf("the cases do not exercise both outcomes: %d clean, %d conflicted", clean, conflicted)
	}
}

// BenchmarkMerge merges two edits of a 2,000-line file (the size of
// SGLang's larger Python modules), a change every 100 lines on each side.
func BenchmarkMerge(b *testing.B) {
	var base []string
	for i := 0; i < 2000; i++ {
		base = append(base, fmt.Sprintf("    line %d = compute(%d)\n", i, i))
	}
	ours, theirs := slices.Clone(base), slices.Clone(base)
	for i := 0; i < 2000; i += 100 {
		ours[i] = fmt.Sprintf("    ours %d\n", i)
		theirs[i+50] = fmt.Sprintf("    theirs %d\n", i)
	}
	b.ResetTimer()
	for b.Loop() {
		if r := Merge(base, ours, theirs); !r.Clean() {
			b.Fatal("conflict")
		}
	}
}

// FuzzMerge checks the properties any three-way merge must have, on
// arbitrary texts: an unchanged side yields the other side, the same edit
// on both sides yields it once, and the verdict and a clean result do not
// depend on which side is ours. Run with go test -fuzz FuzzMerge.
func FuzzMerge(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nB\nc\n", "a\nb\nC\n")
	f.Add("a\nb\n", "a\nx\nb\n", "a\ny\nb\n")
	f.Add("", "x", "y\n")
	f.Add("a\r\nb", "a\r\nb\n", "b")
	f.Fuzz(func(t *testing.T, b, o, th string) {
		base, ours, theirs := lines(b), lines(o), lines(th)
		if r := Merge(base, base, theirs); !r.Clean() || strings.Join(r.Lines, "") != th {
			t.Fatalf("unchanged ours: %+v", r)
		}
		if r := Merge(base, ours, base); !r.Clean() || strings.Join(r.Lines, "") != o {
			t.Fatalf("unchanged theirs: %+v", r)
		}
		if r := Merge(base, ours, ours); !r.Clean() || strings.Join(r.Lines, "") != o {
			t.Fatalf("same edit on both sides: %+v", r)
		}
		r1, r2 := Merge(base, ours, theirs), Merge(base, theirs, ours)
		if r1.Clean() != r2.Clean() || len(r1.Conflicts) != len(r2.Conflicts) {
			t.Fatalf("not symmetric: %d vs %d conflicts", len(r1.Conflicts), len(r2.Conflicts))
		}
		if r1.Clean() && !slices.Equal(r1.Lines, r2.Lines) {
			t.Fatalf("clean merges differ by side: %q vs %q", r1.Lines, r2.Lines)
		}
	})
}
