package gitdir

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// A git directory Create makes is a repository to go-git (it commits
// there, making the directories it needs) and to git (fsck, rev-parse,
// status), and holds nothing else.
func TestCreateIsARepository(t *testing.T) {
	dir := t.TempDir()
	cfg := config.NewConfig()
	cfg.Remotes["origin"] = &config.RemoteConfig{Name: "origin", URLs: []string{"/up"}}
	if err := Create(filepath.Join(dir, ".git"), cfg); err != nil {
		t.Fatal(err)
	}
	var made []string
	if err := filepath.WalkDir(filepath.Join(dir, ".git"), func(p string, _ os.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		made = append(made, rel)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(made, " "); got != ".git .git/HEAD .git/config .git/objects .git/refs" {
		t.Errorf("made %s", got)
	}
	r, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := r.Config(); err != nil || c.Core.IsBare || c.Remotes["origin"] == nil {
		t.Errorf("config: %+v, %v", c, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add("f.txt"); err != nil {
		t.Fatal(err)
	}
	h, err := w.Commit("c", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@t"}})
	if err != nil {
		t.Fatal(err)
	}
	if ref, err := r.Reference(plumbing.Master, false); err != nil || ref.Hash() != h {
		t.Errorf("master: %v, %v; want %s", ref, err, h)
	}
	if _, err := exec.LookPath("git"); err != nil {
		return // CI has git; the go-git half above is the one arpatch needs
	}
	for _, args := range [][]string{{"fsck", "--strict"}, {"rev-parse", "HEAD"}, {"status", "--porcelain"}} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_OPTIONAL_LOCKS=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "rev-parse" && strings.TrimSpace(string(out)) != h.String() {
			t.Errorf("git rev-parse HEAD = %s, want %s", out, h)
		}
		if args[0] == "status" && len(out) != 0 {
			t.Errorf("git status after the commit:\n%s", out)
		}
	}
}
