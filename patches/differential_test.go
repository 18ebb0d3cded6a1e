package patches

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// genCase makes one random file, an edit of it (the patch is git's diff
// of the two) and a target the patch is applied to: the file itself, or
// the file with lines inserted or deleted elsewhere, a block duplicated
// (so context repeats), CRLF line endings, or its final newline toggled.
// A nil side is an absent file (creation or deletion).
func genCase(r *rand.Rand) (orig, edited, target *string, ctx int) {
	vocab := []string{"a", "b", "c", "x", "{", "}", "", "  call();", "return;", "if (full_nvlink_) {", "KL(ngpus, one_stage);", "\t"}
	eol := "\n"
	if r.Intn(10) == 0 {
		eol = "\r\n"
	}
	var lines []string
	for i := r.Intn(30); i > 0; i-- {
		lines = append(lines, vocab[r.Intn(len(vocab))])
	}
	dup := func(ls []string) []string {
		if len(ls) < 3 {
			return ls
		}
		i := r.Intn(len(ls) - 2)
		n := 2 + r.Intn(min(4, len(ls)-i-1))
		at := r.Intn(len(ls) + 1)
		block := append([]string(nil), ls[i:i+n]...)
		return append(append(append([]string(nil), ls[:at]...), block...), ls[at:]...)
	}
	if r.Intn(3) == 0 {
		lines = dup(lines)
	}
	join := func(ls []string, noEOL bool) string {
		s := strings.Join(ls, eol)
		if len(ls) > 0 && !noEOL {
			s += eol
		}
		return s
	}
	noEOL := r.Intn(7) == 0
	o := join(lines, noEOL)
	ed := append([]string(nil), lines...)
	for k := 1 + r.Intn(4); k > 0; k-- {
		switch at := r.Intn(len(ed) + 1); r.Intn(3) {
		case 0:
			ed = append(ed[:at], append([]string{"+" + vocab[r.Intn(len(vocab))]}, ed[at:]...)...)
		case 1:
			if at < len(ed) {
				ed = append(ed[:at], ed[at+1:]...)
			}
		default:
			if at < len(ed) {
				ed[at] = "~" + ed[at]
			}
		}
	}
	e := join(ed, noEOL != (r.Intn(10) == 0))
	tg := append([]string(nil), lines...)
	tNoEOL := noEOL
	if r.Intn(10) < 7 {
		for k := 1 + r.Intn(3); k > 0; k-- {
			switch at := r.Intn(len(tg) + 1); r.Intn(6) {
			case 0, 1:
				tg = append(tg[:at], append([]string{"inserted", vocab[r.Intn(len(vocab))]}[:1+r.Intn(2)], tg[at:]...)...)
			case 2:
				if at < len(tg) {
					tg = append(tg[:at], tg[at+1:]...)
				}
			case 3, 4:
				tg = dup(tg)
			default:
				tNoEOL = !tNoEOL
			}
		}
	}
	tgs := join(tg, tNoEOL)
	if r.Intn(20) == 0 {
		tgs = strings.ReplaceAll(strings.ReplaceAll(tgs, "\r\n", "\n"), "\n", "\r\n")
	}
	orig, edited, target = &o, &e, &tgs
	switch r.Intn(20) {
	case 0:
		orig, target = nil, nil
	case 1:
		edited = nil
		if r.Intn(2) == 0 {
			target = &o
		}
	}
	ctx = []int{3, 3, 3, 3, 1, 2, 0}[r.Intn(7)]
	return orig, edited, target, ctx
}

// checkAgainstGit makes the patch with git diff and compares arpatch
// with git apply on the target; a disagreement fails the test.
func checkAgainstGit(t *testing.T, dir string, orig, edited, target *string, ctx int) (outcome, bool) {
	t.Helper()
	if !differs(orig, edited) {
		return "", false
	}
	return checkPatch(t, dir, gitDiff(t, dir, "f.txt", orig, edited, ctx), target)
}

// differs says whether a case has a change for git diff to show.
func differs(orig, edited *string) bool {
	return !(orig == nil && edited == nil) && !(orig != nil && edited != nil && *orig == *edited)
}

// checkPatch compares arpatch with git apply applying patch (git diff's,
// "" for none) to the target; a disagreement fails the test.
func checkPatch(t *testing.T, dir, patch string, target *string) (outcome, bool) {
	t.Helper()
	if patch == "" {
		return "", false
	}
	files := map[string]string{}
	if target != nil {
		files["f.txt"] = *target
	}
	out, detail := compareWithGit(t, filepath.Join(dir, "tree"), files, patch)
	if strings.HasPrefix(string(out), "DISAGREE") {
		t.Errorf("%s\n%s\npatch:\n%s\ntarget: %q", out, detail, patch, files["f.txt"])
	}
	return out, true
}

// diffCase is one of genCase's cases.
type diffCase struct {
	orig, edited, target *string
	ctx                  int
}

// gitDiffs returns, for each case that differs, the patch gitDiff makes
// of it (named f.txt). Every side is a blob in one pack that git
// fast-import writes to a bare repository in dir, as <ctx>/<i>.txt in
// commit refs/old or refs/new (an absent side is no file); one `git diff`
// of the two commits per context width, limited to <ctx>/, writes for
// each file what `git diff --no-index` writes for it alone (checked by
// TestAgainstGitApplyRandom). Cases that do not differ get "".
func gitDiffs(t *testing.T, dir string, cases []diffCase) []string {
	t.Helper()
	git := func(stdin string, args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env, cmd.Stdin = dir, gitEnv(dir), strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var ee *exec.ExitError
		if err != nil && !(args[0] == "diff" && errors.As(err, &ee) && ee.ExitCode() == 1) {
			t.Fatalf("git %s: %v: %s", args[0], err, stderr.String())
		}
		return string(out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git("", "init", "-q", "--bare", "--template=", ".")
	var stream strings.Builder
	ctxs := map[int]bool{}
	for _, side := range []string{"old", "new"} {
		fmt.Fprintf(&stream, "commit refs/%s\ncommitter t <t> 0 +0000\ndata 0\n", side)
		for i, c := range cases {
			s := c.orig
			if side == "new" {
				s = c.edited
			}
			if !differs(c.orig, c.edited) || s == nil {
				continue
			}
			ctxs[c.ctx] = true
			fmt.Fprintf(&stream, "M 100644 inline %d/%d.txt\ndata %d\n%s\n", c.ctx, i, len(*s), *s)
		}
		stream.WriteString("\n")
	}
	git(stream.String(), "-c", "fastimport.unpackLimit=0", "fast-import", "--quiet", "--date-format=raw")
	patches := make([]string, len(cases))
	header := regexp.MustCompile(`^diff --git a/\d+/(\d+)\.txt `)
	for ctx := range ctxs {
		out := git("", "diff", "--no-renames", "--no-color", "--no-ext-diff", fmt.Sprintf("-U%d", ctx), "refs/old", "refs/new", "--", strconv.Itoa(ctx)+"/")
		// Each file's patch starts at its "diff --git" line (a patch's
		// other lines start with a space, +, -, @, \ or a header word).
		cur := -1
		for _, l := range strings.SplitAfter(out, "\n") {
			if m := header.FindStringSubmatch(l); m != nil {
				cur, _ = strconv.Atoi(m[1])
			}
			if cur >= 0 {
				patches[cur] += l
			}
		}
	}
	for i, p := range patches {
		name := strconv.Itoa(cases[i].ctx) + "/" + strconv.Itoa(i) + ".txt"
		for _, side := range []string{"a/", "b/"} {
			p = strings.ReplaceAll(p, side+name, side+"f.txt")
		}
		patches[i] = p
	}
	return patches
}

// TestAgainstGitApplyRandom runs random cases (genCase) through arpatch
// and git apply: each must agree, or be one of arpatch's deliberate
// stricter refusals (an ambiguous placement). git diff makes the patches
// of all cases with one run per context width over blobs in one pack
// (gitDiffs), git apply applies each case's alone. ARPATCH_DIFF_CASES sets
// the number of cases (default 150); the seed is fixed, so a failure
// reproduces.
func TestAgainstGitApplyRandom(t *testing.T) {
	needGit(t)
	n := 150
	if s := os.Getenv("ARPATCH_DIFF_CASES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("ARPATCH_DIFF_CASES=%q: %v", s, err)
		}
	}
	seed := int64(11)
	if s := os.Getenv("ARPATCH_DIFF_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	r := rand.New(rand.NewSource(seed))
	cases := make([]diffCase, n)
	for i := range cases {
		c := &cases[i]
		c.orig, c.edited, c.target, c.ctx = genCase(r)
	}
	// One tree for every case: gitApply makes it hold each case's
	// target in turn.
	dir := t.TempDir()
	patches := gitDiffs(t, filepath.Join(dir, "diffs"), cases)
	// The batched patches are git's diffs of each file alone: checked on
	// the first creation, deletion and edit (the same held for 7,000
	// cases of seven other seeds; and for 2,800 cases of seeds 1-6 and
	// 11 these patches and every outcome were those of the two
	// directories' `git diff --no-index` that gitDiffs ran before).
	kinds := map[[2]bool]bool{}
	for i, c := range cases {
		k := [2]bool{c.orig == nil, c.edited == nil}
		if !differs(c.orig, c.edited) || kinds[k] {
			continue
		}
		kinds[k] = true
		if alone := gitDiff(t, filepath.Join(dir, "alone"), "f.txt", c.orig, c.edited, c.ctx); patches[i] != alone {
			t.Fatalf("case %d: git diff of the commits gave\n%s\nof the file alone\n%s", i, patches[i], alone)
		}
	}
	if len(kinds) != 3 {
		t.Errorf("the generator made no case of each side absent: %v", kinds)
	}
	counts := map[outcome]int{}
	for i := 0; i < n && !t.Failed(); i++ {
		if out, ok := checkPatch(t, dir, patches[i], cases[i].target); ok {
			counts[out]++
		}
	}
	var keys []string
	for k, v := range counts {
		keys = append(keys, strconv.Itoa(v)+" "+string(k))
	}
	sort.Strings(keys)
	t.Logf("%d cases, seed %d: %s", n, seed, strings.Join(keys, "; "))
	if counts[bothApplySame] == 0 || counts[bothRefuse] == 0 {
		t.Errorf("the generator made no case of each kind: %v", counts)
	}
}

// FuzzAgainstGitApply is the same comparison driven by the fuzzer:
//
//	go test -fuzz FuzzAgainstGitApply ./patches
//
// The seeds are issue 11's failing inputs.
func FuzzAgainstGitApply(f *testing.F) {
	// Input 1: the hunk has no trailing context; the file goes on.
	f.Add("x\ny\n", "x\ny\nz\n", "x\ny\nq\n", uint8(3))
	// ...and its sibling: old side at line 1, file grew above.
	f.Add("x\ny\nq\nr\n", "z\nx\ny\nq\nr\n", "h\nx\ny\nq\nr\n", uint8(3))
	// Input 2: fits equally at lines 3 and 13, not at its header's 8.
	f.Add("h1\nh2\nf1\nf2\nf3\nf4\nf5\nctxA\nctxB\ntarget\nctxC\nctxD\ntail\n",
		"h1\nh2\nf1\nf2\nf3\nf4\nf5\nctxA\nctxB\nPATCHED\nctxC\nctxD\ntail\n",
		"h1\nh2\nctxA\nctxB\ntarget\nctxC\nctxD\nf1\nf2\nf3\nf4\nf5\nctxA\nctxB\ntarget\nctxC\nctxD\ntail\n", uint8(2))
	// Input 7: context that differs only in trailing whitespace.
	f.Add("one\ntwo\nthree\nfour\n", "one\ntwo\nTHREE\nfour\n", "one\ntwo \nthree\nfour\n", uint8(1))
	// CRLF and no final newline.
	f.Add("a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n", "a\r\nb\r\nc\r\n", uint8(3))
	f.Add("a\nb", "a\nb\n", "z\na\nb", uint8(3))
	f.Fuzz(func(t *testing.T, orig, edited, target string, ctx uint8) {
		needGit(t)
		if strings.ContainsRune(orig+edited+target, 0) {
			return // git diff calls a file with NUL binary
		}
		checkAgainstGit(t, t.TempDir(), &orig, &edited, &target, int(ctx%4))
	})
}
