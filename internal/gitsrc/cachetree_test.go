package gitsrc

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// parseCacheTree and treesByPath read every valid directory of a TREE
// body by its path, also below an invalidated one, and refuse a malformed
// body; goGitTree gives the valid ones as go-git's decoder does.
func TestCacheTrees(t *testing.T) {
	h := func(s string) plumbing.Hash { return plumbing.ComputeHash(plumbing.TreeObject, []byte(s)) }
	raw := func(s string) string { x := h(s); return string(x[:]) }
	// root (invalid) > a (valid, 3 entries) > b (valid, 1); root > c (invalid) > d (valid, 2)
	body := "\x00-1 2\n" + "a\x003 1\n" + raw("a") + "b\x001 0\n" + raw("a/b") + "c\x00-1 1\n" + "d\x002 0\n" + raw("c/d")
	cacheTrees := func(b string) (map[string]cachedTree, bool) {
		nodes, ok := parseCacheTree([]byte(b))
		if !ok {
			return nil, false
		}
		return treesByPath(nodes)
	}
	got, ok := cacheTrees(body)
	want := map[string]cachedTree{"a": {3, h("a")}, "a/b": {1, h("a/b")}, "c/d": {2, h("c/d")}}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("cacheTrees = %v, %v; want %v", got, ok, want)
	}
	for _, bad := range []string{body[:len(body)-1], body + "x", "\x00-1 1\n", "\x00x 0\n", "\x00-1 -1\n"} {
		if _, ok := cacheTrees(bad); ok {
			t.Errorf("cacheTrees(%q) took a malformed body", bad)
		}
	}
	nodes, _ := parseCacheTree([]byte(body))
	gg := goGitTree(nodes)
	wantGG := []index.TreeEntry{{Path: "a", Entries: 3, Trees: 1, Hash: h("a")}, {Path: "b", Entries: 1, Trees: 0, Hash: h("a/b")}, {Path: "d", Entries: 2, Trees: 0, Hash: h("c/d")}}
	if !reflect.DeepEqual(gg.Entries, wantGG) {
		t.Errorf("goGitTree = %+v; want %+v", gg.Entries, wantGG)
	}
}

// hash takes the cache tree's hash for a directory it holds as valid over
// as many entries as the index has there, and hashes the entries where
// the counts differ.
func TestIndexTreeHashTakesValidCacheTrees(t *testing.T) {
	blob := plumbing.ComputeHash(plumbing.BlobObject, []byte("x"))
	entries := []*index.Entry{
		{Name: "a/b/f", Hash: blob, Mode: filemode.Regular},
		{Name: "a/g", Hash: blob, Mode: filemode.Regular},
		{Name: "top", Hash: blob, Mode: filemode.Regular},
	}
	truth := newIndexTree(entries).hash("")
	fake := plumbing.ComputeHash(plumbing.TreeObject, []byte("not a/b's tree"))
	used := newIndexTree(entries)
	used.cached = map[string]cachedTree{"a/b": {1, fake}}
	if used.hash("") == truth || used.dirs["a/b"].sum != fake {
		t.Error("a valid cache tree entry over a/b's one entry was not used")
	}
	stale := newIndexTree(entries)
	stale.cached = map[string]cachedTree{"a/b": {2, fake}, "a": {1, fake}}
	if stale.hash("") != truth {
		t.Error("cache tree entries whose entry counts differ from the index's were used")
	}
}

// After `git add` has invalidated the cache tree's root and the path's
// directories, Changes takes the other directories' hashes from it and
// still gives git's answer: the staged change; after `git write-tree`
// (every directory valid again, the root's hash not HEAD's) the same;
// after `git reset` none staged.
func TestChangesWithPartlyInvalidCacheTree(t *testing.T) {
	needGit(t)
	up, commit := richFixture(t, true)
	r := checkoutClone(t, up, commit)
	if err := os.WriteFile(filepath.Join(r.Dir, "a/b/c/deep.py"), []byte("print('staged')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, r.Dir, "add", "a/b/c/deep.py")
	_, trees, err := r.indexAndTrees()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := trees[""]; ok || len(trees) == 0 || trees["sub"].entries != 2 {
		t.Fatalf("git's cache tree after add: %v; the test wants the root invalid and sub/ valid", trees)
	}
	for _, step := range []struct{ name, want string }{{"after add", "M  a/b/c/deep.py"}, {"after write-tree", "M  a/b/c/deep.py"}, {"after reset", " M a/b/c/deep.py"}} {
		switch step.name {
		case "after write-tree":
			gitOut(t, r.Dir, "write-tree")
			if _, trees, err := r.indexAndTrees(); err != nil || trees[""].entries == 0 {
				t.Fatalf("after git write-tree the cache tree's root is not valid: %v, %v", trees[""], err)
			}
		case "after reset":
			gitOut(t, r.Dir, "reset", "-q")
		}
		got, err := r.Changes()
		if err != nil {
			t.Fatal(err)
		}
		g := strings.Join(porcelain(got), "\n")
		if g != step.want {
			t.Errorf("%s: Changes = %q, want %q", step.name, g, step.want)
		}
		if w := strings.TrimRight(gitOut(t, r.Dir, "status", "--porcelain", "-uall"), "\n"); g != w {
			t.Errorf("%s: Changes = %q, git status = %q", step.name, g, w)
		}
	}
}
