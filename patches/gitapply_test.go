package patches

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// These helpers compare arpatch's engine with git apply, the reference
// implementation of the placement rules it follows. git runs with no
// system or global configuration, outside any repository.

func needGit(t testing.TB) string {
	t.Helper()
	g, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed: the differential tests against git apply need it")
	}
	return g
}

func gitEnv(home string) []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+home, "LC_ALL=C")
}

// gitDiff returns `git diff --no-index -U<ctx>` of old against new, with
// the paths written as a/<name> and b/<name>; an absent side is /dev/null.
func gitDiff(t testing.TB, dir, name string, old, new *string, ctx int) string {
	t.Helper()
	write := func(sub string, s *string) string {
		if s == nil {
			return "/dev/null"
		}
		p := filepath.Join(dir, sub, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(*s), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(sub, name)
	}
	a, b := write("old", old), write("new", new)
	cmd := exec.Command("git", "diff", "--no-index", "--no-color", "--no-ext-diff", fmt.Sprintf("-U%d", ctx), a, b)
	cmd.Dir, cmd.Env = dir, gitEnv(dir)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("git diff: %v", err)
	}
	s := string(out)
	s = strings.ReplaceAll(s, "a/old/"+name, "a/"+name)
	s = strings.ReplaceAll(s, "b/new/"+name, "b/"+name)
	s = strings.ReplaceAll(s, "a/new/"+name, "a/"+name)
	s = strings.ReplaceAll(s, "b/old/"+name, "b/"+name)
	return s
}

// gitApply applies patch with git apply (reading it from stdin) to the
// directory dir made to hold exactly files, and returns the files after,
// or git's error. dir is reused from call to call: a file already there
// is rewritten in place (mode 0644, as a new one gets) and anything not in
// files is removed, so a case makes no new directory, patch file or
// inode for a target its previous case left.
func gitApply(t testing.TB, dir string, files map[string]string, patch string) (map[string]string, error) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if _, keep := files[filepath.ToSlash(rel)]; keep && d.Type().IsRegular() {
			return nil
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		return os.Remove(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first; one still holding a kept file stays
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			t.Fatal(err)
		}
	}
	for p, c := range files {
		fp := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fp, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(fp, 0o644); err != nil { // git apply may have changed a kept file's mode
			t.Fatal(err)
		}
	}
	cmd := exec.Command("git", "apply", "--whitespace=nowarn")
	cmd.Dir, cmd.Env, cmd.Stdin = dir, gitEnv(dir), strings.NewReader(patch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git apply: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	after := map[string]string{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		after[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return after, nil
}

// arpatchApply applies patch with the engine to files and returns the
// files after, or the engine's error (a parse error included).
func arpatchApply(files map[string]string, patch string) (map[string]string, error) {
	d, err := ParseDiff("0001-diff.patch", []byte(patch))
	if err != nil {
		return nil, err
	}
	res, err := Apply(memTree(files), []*Patch{{Name: "0001-diff.patch", Diff: d}})
	if err != nil {
		return nil, err
	}
	return withResult(files, res), nil
}

// withResult returns a copy of base with a result's files written or
// deleted.
func withResult(base memTree, res *Result) memTree {
	after := memTree{}
	for k, v := range base {
		after[k] = v
	}
	for _, f := range res.Files {
		if f.After == nil {
			delete(after, f.Path)
		} else {
			after[f.Path] = string(f.After)
		}
	}
	return after
}

// outcome classifies one comparison.
type outcome string

const (
	bothApplySame    outcome = "both apply, same bytes"
	bothRefuse       outcome = "both refuse"
	stricterAmbig    outcome = "arpatch refuses as ambiguous, git apply takes the nearest copy"
	stricterOrder    outcome = "arpatch refuses hunks out of order"
	stricterRename   outcome = "arpatch refuses a rename or copy by name"
	stricterBinary   outcome = "arpatch refuses a binary patch by name"
	stricterNoEOL    outcome = "arpatch matches a line marked \"No newline at end of file\" only at the end of the file (git apply matches it mid-file and joins or doubles lines)"
	disagreeBytes    outcome = "DISAGREE: both apply, different bytes"
	disagreeArpatch  outcome = "DISAGREE: arpatch applies, git apply refuses"
	disagreeGitApply outcome = "DISAGREE: git apply applies, arpatch refuses"
)

// compareWithGit applies patch to files with both and classifies the
// result; detail explains a disagreement.
func compareWithGit(t testing.TB, dir string, files map[string]string, patch string) (outcome, string) {
	t.Helper()
	want, gerr := gitApply(t, dir, files, patch)
	got, aerr := arpatchApply(files, patch)
	switch {
	case gerr == nil && aerr == nil:
		for k := range want {
			if want[k] != got[k] {
				return disagreeBytes, fmt.Sprintf("%s: git apply wrote %q, arpatch %q", k, want[k], got[k])
			}
		}
		if len(want) != len(got) {
			return disagreeBytes, fmt.Sprintf("git apply left %d files, arpatch %d", len(want), len(got))
		}
		return bothApplySame, ""
	case gerr != nil && aerr != nil:
		return bothRefuse, ""
	case gerr != nil:
		return disagreeArpatch, gerr.Error()
	}
	var ce *ConflictError
	msg := aerr.Error()
	switch {
	case errors.As(aerr, &ce) && ce.Ambiguous():
		return stricterAmbig, msg
	case strings.Contains(msg, "is out of order"):
		return stricterOrder, msg
	case strings.Contains(msg, "renames and copies are not supported"), strings.Contains(msg, "renames are not supported"):
		return stricterRename, msg
	case strings.Contains(msg, "binary patches are not supported"):
		return stricterBinary, msg
	case strings.Contains(msg, "a line without newline would land mid-file"):
		return stricterNoEOL, msg
	case errors.As(aerr, &ce) && len(ce.Expected) > 0 && !strings.HasSuffix(ce.Expected[len(ce.Expected)-1], "\n"):
		return stricterNoEOL, msg
	}
	return disagreeGitApply, msg
}
