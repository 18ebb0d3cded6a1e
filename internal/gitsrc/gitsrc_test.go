package gitsrc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/arpatch/arpatch/internal/testrepo"
)

// fixture returns a repository of two commits (a/x.txt "one\n" then
// "two\n"; b.txt) on master, made once per test binary and shared:
// tests clone and read it, never write to it (TestMain checks its HEAD).
// A test that adds a ref or a worktree to it takes ownFixture.
func fixture(t *testing.T) (dir, c1, c2 string) {
	t.Helper()
	dir, cs := madeFixture(t, "two commits", makeFixture)
	return dir, cs[0], cs[1]
}

// ownFixture is fixture's repository made for the calling test alone.
func ownFixture(t *testing.T) (dir, c1, c2 string) {
	t.Helper()
	dir, cs := madeFixture(t, "", makeFixture)
	return dir, cs[0], cs[1]
}

// makeFixture writes fixture's repository at dir (no work tree: the
// tests clone and read it) and returns its HEAD.
func makeFixture(dir string) (string, error) {
	h := testrepo.NewHistory(dir)
	if _, err := h.Change("fixture: initial tree", map[string]string{"a/x.txt": "one\n", "b.txt": "b\n"}); err != nil {
		return "", err
	}
	c2, err := h.Change("second", map[string]string{"a/x.txt": "two\n"})
	if err != nil {
		return "", err
	}
	return c2, h.Write()
}

func TestCloneLocalHardlinksAndChecksOut(t *testing.T) {
	up, c1, c2 := fixture(t)
	dst := filepath.Join(t.TempDir(), "work")
	repo, info, err := Clone(context.Background(), up, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Local {
		t.Error("a local path was not cloned locally")
	}
	// The source's object files are shared, not copied.
	var linked int
	err = filepath.WalkDir(filepath.Join(dst, ".git", "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, _ := os.Stat(p)
			if fi.Sys().(*syscall.Stat_t).Nlink > 1 {
				linked++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if linked == 0 {
		t.Error("no object file is hardlinked")
	}
	// Checkout counts its files as it writes them (apply's progress):
	// every one once, up to the total of the commit's two files.
	var calls, last, total atomic.Int64
	repo.CheckoutProgress = func(n, t int) { calls.Add(1); last.Store(max(last.Load(), int64(n))); total.Store(int64(t)) }
	if err := repo.Checkout(c1); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 || last.Load() != 2 || total.Load() != 2 {
		t.Errorf("checkout progress: %d calls, last %d of %d; want 2, 2 of 2", calls.Load(), last.Load(), total.Load())
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a", "x.txt")); string(b) != "one\n" {
		t.Errorf("checked out a/x.txt = %q, want the first commit's", b)
	}
	if h, _ := repo.Head(); h != c1 {
		t.Errorf("HEAD = %s, want %s", h, c1)
	}
	if ch, err := repo.Changes(); err != nil || len(ch) != 0 {
		t.Errorf("fresh checkout has changes %v (err %v)", ch, err)
	}
	// The source's branch is origin/master in the clone.
	if got, err := repo.Resolve("master"); err != nil || got != c2 {
		t.Errorf("Resolve(master) = %s, %v; want %s", got, err, c2)
	}
	// origin/HEAD names the source's HEAD branch, as git clone writes it,
	// so that `origin` is a revision (git log origin, git rev-parse origin).
	if b, err := os.ReadFile(filepath.Join(dst, ".git", "refs", "remotes", "origin", "HEAD")); err != nil || string(b) != "ref: refs/remotes/origin/master\n" {
		t.Errorf("refs/remotes/origin/HEAD = %q, %v; want the symref git clone writes", b, err)
	}
	if _, err := exec.LookPath("git"); err == nil {
		if got := strings.TrimSpace(gitOut(t, dst, "rev-parse", "origin")); got != c2 {
			t.Errorf("git rev-parse origin = %s, want %s", got, c2)
		}
	}
	if got, err := repo.Resolve(c2[:10]); err != nil || got != c2 {
		t.Errorf("Resolve(short) = %s, %v, want %s", got, err, c2)
	}
	if got, err := repo.Resolve(strings.ToUpper(c2)); err != nil || got != c2 {
		t.Errorf("Resolve(upper-case full hash) = %s, %v", got, err)
	}
	if _, err := repo.Resolve("nosuch"); err == nil || !strings.Contains(err.Error(), "commit nosuch is not in") {
		t.Errorf("Resolve(nosuch): %v", err)
	}
	// Changes lists edits and untracked files with porcelain letters.
	if err := os.WriteFile(filepath.Join(dst, "b.txt"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "u.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ch, _ := repo.Changes()
	if len(ch) != 2 || ch[0].String() != " M b.txt" || !ch[1].Untracked() {
		t.Errorf("changes = %v", ch)
	}
}

func TestCloneThroughTransportAndErrors(t *testing.T) {
	up, c1, _ := fixture(t)
	dst := filepath.Join(t.TempDir(), "work")
	// A file:// URL is a local path: no git binary (go-git's file
	// transport would run git-upload-pack).
	t.Setenv("PATH", "")
	repo, info, err := Clone(context.Background(), "file://"+up, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Local || info.Linked == 0 || info.Copied != 0 || info.How() != "local: objects hardlinked" {
		t.Errorf("file:// clone: %+v, %q", info, info.How())
	}
	if err := repo.Checkout(c1); err != nil {
		t.Fatal(err)
	}
	if err := repo.Checkout(strings.Repeat("ab", 20)); err == nil || !strings.Contains(err.Error(), "pass --repo with a mirror that has it") {
		t.Errorf("missing commit: %v", err)
	}

	if _, _, err := Clone(context.Background(), up, dst, nil); err == nil || !strings.Contains(err.Error(), "already exists and is not empty") {
		t.Errorf("clone into an existing dir: %v", err)
	}
	// An empty directory is taken as it is, as git clone takes one; a
	// failed clone leaves it empty.
	empty := t.TempDir()
	if repo, _, err := Clone(context.Background(), up, empty, nil); err != nil {
		t.Errorf("clone into an empty dir: %v", err)
	} else if err := repo.Checkout(c1); err != nil {
		t.Errorf("checkout in a clone into an empty dir: %v", err)
	}
	empty = t.TempDir()
	if _, _, err := Clone(context.Background(), filepath.Join(up, "a"), empty, nil); err == nil {
		t.Error("a clone of a directory that is no repository succeeded")
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Errorf("a failed clone into an empty dir left %v (%v)", ents, err)
	}
	bad := filepath.Join(t.TempDir(), "nope")
	_, _, err = Clone(context.Background(), "/nonexistent/repo", bad, nil)
	var nr *NoRepoError
	if !errors.As(err, &nr) || !nr.Missing || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "/nonexistent/repo does not exist (no git repository there)") {
		t.Errorf("bad path: %v", err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a failed clone left its directory")
	}
}

// A clone onto another file system cannot hardlink: the objects are
// copied, and CloneInfo says so instead of "hardlinked".
func TestCloneAcrossFileSystems(t *testing.T) {
	up, c1, _ := fixture(t)
	linkFile = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EXDEV} }
	defer func() { linkFile = os.Link }()
	repo, info, err := Clone(context.Background(), up, filepath.Join(t.TempDir(), "work"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Linked != 0 || info.Copied == 0 || info.How() != fmt.Sprintf("local: objects copied (%d files: hardlinks need the same file system)", info.Copied) {
		t.Errorf("%+v: %q", info, info.How())
	}
	if err := repo.Checkout(c1); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAny("file://" + up); err != nil {
		t.Errorf("OpenAny(file://): %v", err)
	}
}

func TestCommitTree(t *testing.T) {
	up, c1, c2 := fixture(t)
	repo, err := OpenAny(up)
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range map[string]string{c1: "one\n", c2: "two\n"} {
		tr, err := repo.TreeAt(c)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := tr.ReadFile("a/x.txt"); err != nil || string(b) != want {
			t.Errorf("a/x.txt at %s = %q, %v; want %q", c[:8], b, err, want)
		}
		if _, err := tr.ReadFile("no/such.txt"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
		}
		if m := tr.Mode("b.txt"); m != "100644" {
			t.Errorf("mode = %q, want 100644", m)
		}
	}
}

func TestResolveRefsBeforeHashPrefixes(t *testing.T) {
	up, c1, c2 := ownFixture(t) // it gets a branch
	repo, err := OpenAny(up)
	if err != nil {
		t.Fatal(err)
	}
	// An abbreviated hash names its commit, as in git, in either case;
	// one that names none is "not in" the repository, not a usage error.
	for _, p := range []string{c1[:8], c1[:4], strings.ToUpper(c1[:12]), c1[:39]} {
		if got, err := repo.Resolve(p); err != nil || got != c1 {
			t.Errorf("Resolve(%s) = %s, %v; want %s", p, got, err, c1)
		}
	}
	none := "0000000"
	if strings.HasPrefix(c1, none) || strings.HasPrefix(c2, none) {
		none = "fffffff"
	}
	var pe *PrefixError
	if _, err := repo.Resolve(none); !errors.As(err, &pe) || errors.Is(err, ErrAbbreviated) || !strings.Contains(err.Error(), "no commit of") {
		t.Errorf("Resolve(%s) = %v, want no commit", none, err)
	}
	// A branch whose name looks like hex is a branch.
	g, err := git.PlainOpen(up)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Storer.SetReference(plumbing.NewHashReference("refs/heads/cafe", plumbing.NewHash(c1))); err != nil {
		t.Fatal(err)
	}
	if got, err := repo.Resolve("cafe"); err != nil || got != c1 {
		t.Errorf("Resolve(cafe) = %s, %v; want %s", got, err, c1)
	}
	// 1 to 3 hex digits name no commit, as in git, even where only one
	// commit starts with them; a branch or tag named so is the ref.
	for _, p := range []string{c2[:1], c2[:2], strings.ToUpper(c2[:3])} {
		var se ShortHashError
		if got, err := repo.Resolve(p); !errors.As(err, &se) || !errors.Is(err, ErrBadRevision) || !strings.Contains(err.Error(), "too short") {
			t.Errorf("Resolve(%s) = %s, %v; want a ShortHashError", p, got, err)
		}
	}
	if err := g.Storer.SetReference(plumbing.NewHashReference(plumbing.ReferenceName("refs/tags/"+c2[:3]), plumbing.NewHash(c1))); err != nil {
		t.Fatal(err)
	}
	if err := g.Storer.SetReference(plumbing.NewHashReference("refs/heads/e", plumbing.NewHash(c1))); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{c2[:3], "e"} {
		if got, err := repo.Resolve(p); err != nil || got != c1 {
			t.Errorf("Resolve(%s), a ref to %s = %s, %v", p, c1, got, err)
		}
	}
	if got, err := repo.Resolve(c2); err != nil || got != c2 {
		t.Errorf("Resolve(full hash) = %s, %v", got, err)
	}
	// A full hash is its commit even when a ref is named by it, as git
	// rev-parse takes it (with a warning).
	if err := g.Storer.SetReference(plumbing.NewHashReference(plumbing.ReferenceName("refs/heads/"+c2), plumbing.NewHash(c1))); err != nil {
		t.Fatal(err)
	}
	if got, err := repo.Resolve(c2); err != nil || got != c2 {
		t.Errorf("Resolve(%s), a branch of that name at %s: %s, %v", c2, c1, got, err)
	}
	if _, err := exec.LookPath("git"); err == nil {
		out := strings.Split(strings.TrimSpace(gitOut(t, up, "rev-parse", c2)), "\n") // its warning first
		if got := out[len(out)-1]; got != c2 {
			t.Errorf("git rev-parse of the full hash: %s, want %s", got, c2)
		}
	}
}

// linkWorktree makes a linked worktree of the checkout up at wt, detached
// at commit, as `git worktree add --detach wt commit` lays it out (go-git
// cannot make one): wt/.git names up/.git/worktrees/<name>, which holds
// the worktree's own HEAD and a commondir back to up/.git.
func linkWorktree(t *testing.T, up, wt, commit string) {
	t.Helper()
	gd := filepath.Join(up, ".git", "worktrees", filepath.Base(wt))
	for _, d := range []string{gd, wt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, s := range map[string]string{
		filepath.Join(gd, "HEAD"):      commit + "\n",
		filepath.Join(gd, "commondir"): "../..\n",
		filepath.Join(gd, "gitdir"):    filepath.Join(wt, ".git") + "\n",
		filepath.Join(wt, ".git"):      "gitdir: " + gd + "\n",
	} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A linked worktree's HEAD is its own, whichever way the repository is
// opened (OpenAny serves --repo: patches check, port, nightly, a dry-run
// apply), and its refs and objects are the main repository's.
func TestLinkedWorktreeHeadIsItsOwn(t *testing.T) {
	up, c1, c2 := ownFixture(t) // up's HEAD is c2; it gets a ref and a worktree
	// A clone has origin/HEAD too: HEAD is never that.
	g, err := git.PlainOpen(up)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Storer.SetReference(plumbing.NewHashReference("refs/remotes/origin/HEAD", plumbing.NewHash(c2))); err != nil {
		t.Fatal(err)
	}
	wt := filepath.Join(t.TempDir(), "wt")
	linkWorktree(t, up, wt, c1)
	for _, p := range []string{wt, "file://" + wt} {
		repo, err := OpenAny(p)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := repo.Head(); err != nil || h != c1 {
			t.Errorf("OpenAny(%s).Head() = %s, %v; want the worktree's %s, not the main checkout's %s", p, h, err, c1, c2)
		}
		if h, err := repo.Resolve("HEAD"); err != nil || h != c1 {
			t.Errorf("OpenAny(%s).Resolve(HEAD) = %s, %v; want %s", p, h, err, c1)
		}
		if h, err := repo.Resolve("master"); err != nil || h != c2 {
			t.Errorf("OpenAny(%s).Resolve(master) = %s, %v; want %s (the main repository's branch)", p, h, err, c2)
		}
		if _, err := repo.TreeAt(c2); err != nil {
			t.Errorf("OpenAny(%s).TreeAt(%s): %v", p, c2, err)
		}
	}
	if repo, err := Open(wt); err != nil {
		t.Fatal(err)
	} else if h, _ := repo.Head(); h != c1 {
		t.Errorf("Open(worktree).Head() = %s, want %s", h, c1)
	}
	// A .git file naming a whole git directory (git clone
	// --separate-git-dir) is a repository too.
	sep := filepath.Join(t.TempDir(), "sep")
	if err := os.MkdirAll(sep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sep, ".git"), []byte("gitdir: "+filepath.Join(up, ".git")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if repo, err := OpenAny(sep); err != nil {
		t.Errorf("OpenAny(separate git dir): %v", err)
	} else if h, _ := repo.Resolve("HEAD"); h != c2 {
		t.Errorf("OpenAny(separate git dir).Resolve(HEAD) = %s, want %s", h, c2)
	}
}

// A repository that borrows its objects (git clone --shared: an absolute
// path in objects/info/alternates) reads them there.
func TestAlternates(t *testing.T) {
	up, c1, c2 := fixture(t)
	sh := filepath.Join(t.TempDir(), "shared")
	if _, err := git.PlainInit(sh, false); err != nil {
		t.Fatal(err)
	}
	for p, s := range map[string]string{
		filepath.Join(sh, ".git", "objects", "info", "alternates"): filepath.Join(up, ".git", "objects") + "\n",
		filepath.Join(sh, ".git", "HEAD"):                          c1 + "\n",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, open := range []func(string) (*Repo, error){Open, OpenAny} {
		repo, err := open(sh)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := repo.Resolve("HEAD"); err != nil || h != c1 {
			t.Errorf("Resolve(HEAD) = %s, %v; want %s", h, err, c1)
		}
		// An abbreviated hash is looked up in the alternate too.
		if h, err := repo.Resolve(c2[:12]); err != nil || h != c2 {
			t.Errorf("Resolve(%s) = %s, %v; want %s", c2[:12], h, err, c2)
		}
		if ct, err := repo.TreeAt(c2); err != nil {
			t.Errorf("TreeAt(%s): %v", c2, err)
		} else if b, err := ct.ReadFile("a/x.txt"); err != nil || string(b) != "two\n" {
			t.Errorf("a/x.txt at c2 = %q, %v", b, err)
		}
	}
}

// A clone through go-git's transport (here smart HTTP, served by git's own
// http-backend) gets refs/remotes/origin/HEAD as git clone writes it, as a
// local clone does: `origin` names the source's HEAD branch.
func TestCloneOverHTTPWritesOriginHead(t *testing.T) {
	needGit(t)
	up, _, c2 := fixture(t)
	backend := filepath.Join(strings.TrimSpace(gitOut(t, up, "--exec-path")), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("no git http-backend to serve the clone: %v", err)
	}
	srv := httptest.NewServer(&cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(up), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"},
	})
	defer srv.Close()
	dst := filepath.Join(t.TempDir(), "work")
	repo, info, err := Clone(context.Background(), srv.URL+"/"+filepath.Base(up)+"/.git", dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Local {
		t.Errorf("an http URL was cloned as a local path: %+v", info)
	}
	if b, err := os.ReadFile(filepath.Join(dst, ".git", "refs", "remotes", "origin", "HEAD")); err != nil || string(b) != "ref: refs/remotes/origin/master\n" {
		t.Errorf("refs/remotes/origin/HEAD = %q, %v; want the symref git clone writes", b, err)
	}
	if got := strings.TrimSpace(gitOut(t, dst, "rev-parse", "origin")); got != c2 {
		t.Errorf("git rev-parse origin = %s, want %s", got, c2)
	}
	if got, err := repo.Resolve("master"); err != nil || got != c2 {
		t.Errorf("Resolve(master) = %s, %v; want %s", got, err, c2)
	}
}

// Two commits whose hashes share their first 4 hex digits: the 4-digit
// prefix is ambiguous (a usage error naming both, with the git command
// that lists them, which git runs), and more digits name one.
func TestResolveAmbiguousPrefix(t *testing.T) {
	dir := t.TempDir()
	g, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	w, err := g.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	byPrefix := map[string]string{}
	var a, b string
	for i := 0; a == "" && i < 5000; i++ {
		h, err := w.Commit(fmt.Sprintf("commit %d", i), &git.CommitOptions{AllowEmptyCommits: true, Author: &object.Signature{Name: "t", Email: "t@t", When: time.Unix(1e9, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		c := h.String()
		if o, ok := byPrefix[c[:4]]; ok {
			a, b = o, c
		}
		byPrefix[c[:4]] = c
	}
	if a == "" {
		t.Fatal("no two of 5000 commits share 4 hex digits")
	}
	repo, err := OpenAny(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = repo.Resolve(a[:4])
	var pe *PrefixError
	if !errors.As(err, &pe) || !errors.Is(err, ErrAbbreviated) || len(pe.Candidates) != 2 || !strings.Contains(err.Error(), "rev-parse --disambiguate="+a[:4]) {
		t.Errorf("Resolve(%s), shared by %s and %s: %v", a[:4], a, b, err)
	}
	n := 5
	for a[:n] == b[:n] {
		n++
	}
	if got, err := repo.Resolve(a[:n]); err != nil || got != a {
		t.Errorf("Resolve(%s) = %s, %v; want %s", a[:n], got, err, a)
	}
	if _, err := exec.LookPath("git"); err == nil {
		if out := gitOut(t, dir, "rev-parse", "--disambiguate="+a[:4]); !strings.Contains(out, a) || !strings.Contains(out, b) {
			t.Errorf("the printed remedy lists %q, want both commits", out)
		}
	}
}
