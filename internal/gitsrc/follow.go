package gitsrc

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Rename is one move of a file in upstream's history: the commit whose
// first parent holds From and which holds To instead. Commit c32c4ef79cf5
// ("[Kernel] Move sgl-kernel under sglang.kernels.aot") is such a move of
// the kernel header, byte for byte. Upstream:
// python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh@c32c4ef79cf5218c24f467aad7f3ff392a62bed7
// (the file as sgl-kernel/csrc/allreduce/ held it at c32c4ef79cf5^).
type Rename struct {
	From    string `json:"from"`    // slash path before the move
	To      string `json:"to"`      // slash path after it
	Commit  string `json:"commit"`  // 40-hex commit that moved the file
	Subject string `json:"subject"` // first line of that commit's message
}

func (m Rename) String() string {
	if m.Commit == "" {
		return fmt.Sprintf("moved to %s (%s)", m.To, m.Subject)
	}
	return fmt.Sprintf("moved to %s at %s", m.To, githash.Hash(m.Commit).Short())
}

// DeletedError is a file that a commit on the way removed without a rename
// go-git's detection finds.
type DeletedError struct {
	Path, Commit, Subject string
}

func (e *DeletedError) Error() string {
	return fmt.Sprintf("%s was deleted at %s (%q) and go-git's rename detection finds no file it moved to", e.Path, githash.Hash(e.Commit).Short(), e.Subject)
}

// AmbiguousError is a file that a commit on the way removed while adding
// several files that are equally good renames of it (copies with the same
// bytes): arpatch does not guess which one a patch belongs to.
type AmbiguousError struct {
	Path, Commit, Subject string
	Candidates            []string // the paths it may have gone to, sorted
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("%s went, at %s (%q), to %d files with the same bytes: %s; arpatch does not guess which one the patch belongs to", e.Path, githash.Hash(e.Commit).Short(), e.Subject, len(e.Candidates), strings.Join(e.Candidates, ", "))
}

// ShallowError is history that stops, in a shallow clone, before the
// commit a file would be followed from.
type ShallowError struct {
	Dir     string
	Shallow []string // the commits where its history stops
}

func (e *ShallowError) Error() string {
	return fmt.Sprintf("%s is a shallow clone (its history stops at %s), so the commits between cannot be read to follow a rename: run `%s`, or point --repo at a full clone or mirror", e.Dir, githash.Shorts(e.Shallow), shellq.Join([]string{"git", "-C", e.Dir, "fetch", "--unshallow"}))
}

// Shallow lists the commits where a shallow clone's history stops (git
// clone --depth); none for a full clone.
func (r *Repo) Shallow() []string {
	hs, err := r.r.Storer.Shallow()
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range hs {
		out = append(out, h.String())
	}
	sort.Strings(out)
	return out
}

// NotAncestorError says that from is not on to's first-parent chain, so
// history between them has no single line to follow.
type NotAncestorError struct {
	From, To string
}

func (e *NotAncestorError) Error() string {
	return fmt.Sprintf("commit %s is not a first-parent ancestor of %s; renames are followed along the first-parent chain only: start from a commit that %s descends from (patches port --from REV)", githash.Hash(e.From).Short(), githash.Hash(e.To).Short(), githash.Hash(e.To).Short())
}

// renameScore is the similarity (percent) above which a deleted file and
// an added one in the same commit are a rename: git's default (-M50%).
const renameScore = 50

// maxChain bounds the first-parent walk from to back to from.
const maxChain = 200000

// Follow follows path from commit from (40 hex; the file exists there)
// to commit to along to's first-parent chain, with go-git's rename
// detection, and returns each move in order (a chain over several commits
// gives several); none when the file is still at path at to. Where the
// file vanishes, the commit that removed it is found by bisection over the
// chain (log2 of its length tree lookups) and only that commit is diffed.
//
// It returns a *DeletedError when a commit removed the file without a
// rename, an *AmbiguousError when it went to several identical files, a
// *ShallowError when a shallow clone lacks the history between, a
// *NotAncestorError when from is not on to's first-parent chain,
// and an error naming the path when from does not hold it.
func (r *Repo) Follow(from, to, path string) ([]Rename, error) {
	chain, err := r.firstParentChain(from, to)
	if err != nil {
		return nil, err
	}
	ch := &chainTrees{chain: chain, trees: make([]*object.Tree, len(chain))}
	if ok, err := ch.has(0, path); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%s does not exist at %s, so there is nothing to follow", path, githash.Hash(from).Short())
	}
	var moves []Rename
	cur, lo := path, 0
	last := len(chain) - 1
	for {
		ok, err := ch.has(last, cur)
		if err != nil {
			return nil, err
		}
		if ok {
			return moves, nil
		}
		hi, err := ch.removedAt(lo, cur)
		if err != nil {
			return nil, err
		}
		pt, err := ch.tree(hi - 1)
		if err != nil {
			return nil, err
		}
		ct, err := ch.tree(hi)
		if err != nil {
			return nil, err
		}
		c := chain[hi]
		subject, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
		to, cands, err := renamedTo(pt, ct, cur)
		if err != nil {
			return nil, fmt.Errorf("rename detection at %s: %w", githash.Hash(c.Hash.String()).Short(), err)
		}
		if len(cands) > 1 {
			return moves, &AmbiguousError{Path: cur, Commit: c.Hash.String(), Subject: subject, Candidates: cands}
		}
		if to == "" {
			return moves, &DeletedError{Path: cur, Commit: c.Hash.String(), Subject: subject}
		}
		moves = append(moves, Rename{From: cur, To: to, Commit: c.Hash.String(), Subject: subject})
		cur, lo = to, hi
	}
}

// chainTrees reads the trees of a first-parent chain, each once.
type chainTrees struct {
	chain []*object.Commit
	trees []*object.Tree
}

// tree returns the tree of chain[i].
func (ch *chainTrees) tree(i int) (*object.Tree, error) {
	if ch.trees[i] == nil {
		t, err := ch.chain[i].Tree()
		if err != nil {
			return nil, err
		}
		ch.trees[i] = t
	}
	return ch.trees[i], nil
}

// has says whether chain[i]'s tree holds the path p.
func (ch *chainTrees) has(i int, p string) (bool, error) {
	t, err := ch.tree(i)
	if err != nil {
		return false, err
	}
	_, err = t.FindEntry(p)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrFileNotFound) {
		return false, nil
	}
	return false, err
}

// removedAt returns the index of the commit that removed p, which exists
// at chain[lo] and not at the chain's last commit: a bisection, log2 of
// the chain's length tree lookups.
func (ch *chainTrees) removedAt(lo int, p string) (int, error) {
	hi := len(ch.chain) - 1
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, err := ch.has(mid, p)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// Range returns the commits of a range FROM..TO as `git log
// --first-parent --reverse FROM..TO` lists them: the commits on TO's
// first-parent chain after FROM, oldest first, as 40-hex hashes. FROM
// and TO are any revisions Resolve takes. FROM must be on TO's chain (a
// *NotAncestorError otherwise, which says so): the range is a line of
// upstream's main branch, not a set difference across merges.
func (r *Repo) Range(spec string) ([]string, error) {
	from, to, ok := strings.Cut(spec, "..")
	if !ok || from == "" || to == "" || strings.HasPrefix(to, ".") {
		return nil, badRevision(fmt.Sprintf("%q is not a range FROM..TO (two revisions joined by .., both given; FROM...TO is not taken)", spec))
	}
	f, err := r.Resolve(from)
	if err != nil {
		return nil, err
	}
	t, err := r.Resolve(to)
	if err != nil {
		return nil, err
	}
	chain, err := r.firstParentChain(f, t)
	var na *NotAncestorError
	if errors.As(err, &na) {
		return nil, fmt.Errorf("range %s: %s (%s) is not on the first-parent chain of %s (%s), which a range follows, as git log --first-parent %s does", spec, from, githash.Hash(f).Short(), to, githash.Hash(t).Short(), spec)
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(chain)-1)
	for _, c := range chain[1:] {
		out = append(out, c.Hash.String())
	}
	return out, nil
}

// Precedes reports whether older is on newer's first-parent chain (and
// not newer itself): newer descends from it along the line upstream's
// main branch takes.
func (r *Repo) Precedes(older, newer string) bool {
	if older == newer {
		return false
	}
	_, err := r.firstParentChain(older, newer)
	return err == nil
}

// firstParentChain returns the commits from from to to, oldest first,
// following first parents back from to.
func (r *Repo) firstParentChain(from, to string) ([]*object.Commit, error) {
	fc, err := r.r.CommitObject(plumbing.NewHash(from))
	if err != nil {
		return nil, fmt.Errorf("commit %s is not in %s: %w", from, r.Dir, err)
	}
	// A commit made well before from cannot descend from it: stop there
	// rather than walk the whole history (committer clocks may be off a
	// little, so allow a month).
	floor := fc.Committer.When.Add(-30 * 24 * time.Hour)
	c, err := r.r.CommitObject(plumbing.NewHash(to))
	if err != nil {
		return nil, fmt.Errorf("commit %s is not in %s: %w", to, r.Dir, err)
	}
	var rev []*object.Commit
	for {
		rev = append(rev, c)
		if c.Hash.String() == from {
			break
		}
		if c.NumParents() == 0 || len(rev) > maxChain || c.Committer.When.Before(floor) {
			return nil, &NotAncestorError{From: from, To: to}
		}
		if c, err = c.Parent(0); err != nil {
			if sh := r.Shallow(); len(sh) > 0 {
				return nil, &ShallowError{Dir: r.Dir, Shallow: sh}
			}
			return nil, err
		}
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev, nil
}

// renamedTo diffs parent against child and returns where go-git's rename
// detection (git's default threshold, 50% similar) says path went, or ""
// when it was only deleted. cands lists, when there are several, every
// added file with the same bytes as path or as the one detection chose:
// equally good renames, among which detection's pick is arbitrary.
// Only the deletion of path and the commit's additions are given to the
// detector, so a commit that moves thousands of files costs one row of
// its similarity matrix.
func renamedTo(parent, child *object.Tree, path string) (to string, cands []string, err error) {
	changes, err := object.DiffTree(parent, child)
	if err != nil {
		return "", nil, err
	}
	var pick object.Changes
	var gone plumbing.Hash
	for _, ch := range changes {
		switch {
		case ch.From.Name == path && ch.To.Name == "":
			pick = append(pick, ch)
			gone = ch.From.TreeEntry.Hash
		case ch.From.Name == "" && ch.To.Name != "":
			pick = append(pick, ch)
		}
	}
	if len(pick) == 0 {
		return "", nil, nil
	}
	found, err := object.DetectRenames(pick, &object.DiffTreeOptions{DetectRenames: true, RenameScore: renameScore})
	if err != nil {
		return "", nil, err
	}
	var chosen plumbing.Hash
	for _, ch := range found {
		if ch.From.Name == path && ch.To.Name != "" {
			to, chosen = ch.To.Name, ch.To.TreeEntry.Hash
		}
	}
	if to == "" {
		return "", nil, nil
	}
	for _, ch := range pick {
		if ch.From.Name == "" && (ch.To.TreeEntry.Hash == gone || ch.To.TreeEntry.Hash == chosen) {
			cands = append(cands, ch.To.Name)
		}
	}
	sort.Strings(cands)
	if len(cands) < 2 {
		cands = nil
	}
	return to, cands, nil
}
