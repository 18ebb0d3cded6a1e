package gitsrc

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/shellq"
)

// Repo is a git repository with a work tree, or a bare one.
type Repo struct {
	Dir string // the work tree (or, bare, the git directory)
	// CheckoutProgress, when set, is told how many of Checkout's files
	// are written (done of total), after each; it may be called from
	// several goroutines at once.
	CheckoutProgress func(done, total int)
	r                *git.Repository
	once             sync.Once
	obj              *objectReader
	treeMu           sync.Mutex                           // guards trees, blobs, blobBytes
	trees            map[plumbing.Hash][]object.TreeEntry // see treeEntries
	blobs            map[plumbing.Hash][]byte             // see blob
	blobBytes        int
}

// Open opens the checkout at dir. It returns an error naming dir when dir
// is missing or is not a git checkout.
func Open(dir string) (*Repo, error) {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// A new user's first status, revert or build.
		return nil, NoCheckoutError(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("--src %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("--src %s is a file, not a checkout", dir)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git")); err != nil {
		return nil, fmt.Errorf("%s is not the top of a git checkout (no .git there); point --src at the SGLang checkout's top directory", dir)
	}
	// EnableDotGitCommonDir opens linked worktrees (git worktree add).
	r, err := plainOpen(dir, true)
	if err != nil {
		if errors.Is(err, git.ErrRepositoryNotExists) {
			return nil, fmt.Errorf("%s is not a git checkout; point --src at an SGLang checkout", dir)
		}
		return nil, fmt.Errorf("open %s: %w (arpatch reads repositories through go-git, which does not support every git extension, e.g. sparse checkout)", dir, err)
	}
	return &Repo{Dir: dir, r: r}, nil
}

// NoCheckoutError is Open's error for a dir where nothing is: the apply
// that makes a checkout there. It is fs.ErrNotExist.
type NoCheckoutError string

func (dir NoCheckoutError) Error() string {
	return fmt.Sprintf("--src %s: no checkout there: `%s` clones SGLang there at the recipe's commit and applies its series (add --repo with a local mirror), or point --src at your SGLang checkout",
		string(dir), shellq.Join([]string{"arpatch", "apply", "--src", string(dir)}))
}

func (NoCheckoutError) Unwrap() error { return fs.ErrNotExist }

// OpenAny opens a checkout or a bare repository (a mirror) at path, a
// directory or a file:// URL.
func OpenAny(path string) (*Repo, error) {
	gd := LocalGitDir(path)
	if gd == "" {
		return nil, noRepo(path, "")
	}
	r, err := plainOpen(gd, false)
	if dir, ok := dotGitFile(path); ok {
		// A linked worktree (git worktree add) or a checkout whose .git
		// file points elsewhere: HEAD is the worktree's own
		// (.git/worktrees/<name>/HEAD), refs and objects the main
		// repository's, as git reads them. Opening the main git directory
		// would read the main checkout's HEAD instead.
		r, err = plainOpen(dir, true)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &Repo{Dir: path, r: r}, nil
}

// plainOpen is go-git's PlainOpenWithOptions, and, where the repository
// borrows objects from another (objects/info/alternates: git clone
// --shared or --reference), the same repository with those alternates
// read at their absolute paths: go-git's default file system is rooted at
// the git directory and cannot reach them, so every commit there would be
// "not in" the repository.
func plainOpen(path string, commonDir bool) (*git.Repository, error) {
	r, err := git.PlainOpenWithOptions(path, &git.PlainOpenOptions{EnableDotGitCommonDir: commonDir})
	if err != nil {
		return nil, err
	}
	gd := LocalGitDir(path)
	if gd == "" {
		return r, nil
	}
	if _, err := os.Stat(filepath.Join(gd, "objects", "info", "alternates")); err != nil {
		return r, nil
	}
	st, ok := r.Storer.(*filesystem.Storage)
	if !ok {
		return r, nil
	}
	var wt billy.Filesystem
	if w, err := r.Worktree(); err == nil {
		wt = w.Filesystem
	}
	if alts := openAlternates(filepath.Join(gd, "objects")); alts != nil {
		return git.Open(&altStorage{Storage: st, alts: alts}, wt)
	}
	ns := filesystem.NewStorageWithOptions(st.Filesystem(), cache.NewObjectLRUDefault(), filesystem.Options{AlternatesFS: osfs.New("/")})
	return git.Open(ns, wt)
}

// dotGitFile returns the directory of path (a path or file:// URL) when
// its .git is a file ("gitdir: X"), as in a linked worktree.
func dotGitFile(path string) (string, bool) {
	p, ok := localPath(path)
	if !ok {
		return "", false
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", false
	}
	fi, err := os.Lstat(filepath.Join(abs, ".git"))
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return abs, true
}

// GitDir returns the checkout's own git directory: dir/.git, or for a
// linked worktree the directory its .git file points at
// (.git/worktrees/<name> of the main repository), so that state kept there
// belongs to this worktree alone.
func (r *Repo) GitDir() string {
	p := filepath.Join(r.Dir, ".git")
	fi, err := os.Stat(p)
	if err == nil && fi.IsDir() {
		return p
	}
	if b, err := os.ReadFile(p); err == nil {
		if d, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: "); ok {
			if !filepath.IsAbs(d) {
				d = filepath.Join(r.Dir, d)
			}
			return d
		}
	}
	return r.Dir
}

// Head returns the 40-hex commit HEAD points at.
func (r *Repo) Head() (string, error) {
	h, err := r.r.Head()
	if err != nil {
		return "", fmt.Errorf("%s: reading HEAD: %w", r.Dir, err)
	}
	return h.Hash().String(), nil
}

// ErrAbbreviated marks a revision refused as an abbreviated hash that
// names more than one commit (PrefixError): the
// caller's input is wrong (a usage error), not the repository.
var ErrAbbreviated = errors.New("an ambiguous abbreviated hash")

// ErrBadRevision marks a revision that cannot name a commit whatever the
// repository holds: 1 to 3 hex digits that no branch or tag is named by
// (ShortHashError), or a range without two sides (Range). Like
// ErrAbbreviated it is the caller's input that is wrong (a usage error).
var ErrBadRevision = errors.New("not a revision")

// ShortHashError is Resolve's error for 1 to 3 hex digits that name no
// branch or tag: git takes a hash prefix from 4 digits on (git rev-parse
// 84: "ambiguous argument '84': unknown revision"), so such a string names
// no commit, where go-git's ResolveRevision took the first object that
// starts with it. It wraps ErrBadRevision.
type ShortHashError string

func (e ShortHashError) Error() string {
	return fmt.Sprintf("%q is too short to be a commit hash (an abbreviated hash has at least 4 hex digits, as in git) and no branch or tag is named %s; pass the full 40-hex hash, or 7 or more of its digits", string(e), string(e))
}

func (ShortHashError) Unwrap() error { return ErrBadRevision }

// badRevision is a usage error (ErrBadRevision) that reads msg.
type badRevision string

func (e badRevision) Error() string { return string(e) }
func (badRevision) Unwrap() error   { return ErrBadRevision }

// isShortHex reports whether rev is 1 to 3 hex digits.
func isShortHex(rev string) bool {
	if len(rev) == 0 || len(rev) > 3 {
		return false
	}
	for _, c := range rev {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// Resolve turns a revision (a full hash, a branch, a tag, HEAD, or
// origin/<branch>) into a 40-hex commit; a branch or tag of that name wins
// over a hash prefix, as in git. An abbreviated hash (4 to 39 hex
// digits) resolves as git resolves one, to the one commit it names
// (expandPrefix): go-git's own ResolveRevision takes the first object
// that matches, where git reports the prefix as ambiguous; 1 to 3 hex
// digits that name no ref are a ShortHashError, as git takes them for no
// hash at all (go-git took the first object starting with them). A recipe's
// pin stays a full hash (recipes refuses a short one): what it names
// must not depend on which objects a clone happens to hold. The error
// names the revision.
func (r *Repo) Resolve(rev string) (string, error) {
	// HEAD is the checkout's own, as in git ($GIT_DIR/HEAD comes before
	// any ref): never refs/remotes/origin/HEAD, which a clone has too.
	if rev == "HEAD" {
		h, err := r.r.Head()
		if err != nil {
			return "", fmt.Errorf("%s: reading HEAD: %w", r.Dir, err)
		}
		if _, err := r.r.CommitObject(h.Hash()); err != nil {
			return "", fmt.Errorf("HEAD of %s is %s, which is not in its object store: %w", r.Dir, h.Hash(), err)
		}
		return h.Hash().String(), nil
	}
	// A full hash names its commit, as in git (get_oid_basic: a ref
	// named by 40 hex digits only gets a warning there), without a look
	// at the refs: each lookup of a ref re-reads packed-refs, some ten
	// for every commit `patches check` is given.
	if h := strings.ToLower(rev); githash.Hash(h).IsFull() {
		if _, err := r.commitTreeHash(plumbing.NewHash(h)); err == nil {
			return h, nil
		}
	}
	// A branch or tag may look like hex ("cafe", "dead1234"): refs first.
	for _, name := range []string{"refs/heads/" + rev, "refs/tags/" + rev, "refs/remotes/origin/" + rev} {
		if ref, err := r.r.Reference(plumbing.ReferenceName(name), true); err == nil {
			h := ref.Hash()
			if tag, err := r.r.TagObject(h); err == nil { // annotated tag
				if c, err := tag.Commit(); err == nil {
					return c.Hash.String(), nil
				}
			}
			if _, err := r.r.CommitObject(h); err == nil {
				return h.String(), nil
			}
		}
	}
	if githash.Hash(rev).IsAbbreviated() {
		return r.expandPrefix(strings.ToLower(rev))
	}
	if isShortHex(rev) {
		return "", ShortHashError(rev)
	}
	if rev == "" {
		return "", fmt.Errorf("empty revision")
	}
	tries := []string{rev}
	if !strings.Contains(rev, "/") {
		tries = append(tries, "origin/"+rev, "refs/remotes/origin/"+rev)
	}
	for _, t := range tries {
		h, err := r.r.ResolveRevision(plumbing.Revision(t))
		if err == nil {
			if _, err := r.r.CommitObject(*h); err == nil {
				return h.String(), nil
			}
		}
	}
	return "", fmt.Errorf("commit %s is not in %s; fetch it there first, or check the hash", rev, r.Dir)
}

func (r *Repo) remoteURL() string {
	rem, err := r.r.Remote("origin")
	if err != nil || len(rem.Config().URLs) == 0 {
		return "(no origin)"
	}
	return rem.Config().URLs[0]
}

// Change is one uncommitted change in a work tree, as `git status
// --porcelain` shows it: two status letters and a path.
type Change struct {
	Staging  byte   `json:"-"` // ' ', 'M', 'A', 'D', 'R', 'C', 'U', '?'
	Worktree byte   `json:"-"`
	Path     string `json:"path"`
}

// MarshalJSON writes {"path", "status": "XY"} as `git status --porcelain` does.
func (c Change) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`{"status":%q,"path":%q}`, string([]byte{c.Staging, c.Worktree}), c.Path)), nil
}

func (c Change) String() string { return fmt.Sprintf("%c%c %s", c.Staging, c.Worktree, c.Path) }

// Untracked reports whether the path is untracked (and not ignored).
func (c Change) Untracked() bool { return c.Staging == '?' && c.Worktree == '?' }

// SkipWorktree lists the index entries marked skip-worktree, sorted: git
// status does not look at their files, so edits there go unseen.
// (Changes compares assume-unchanged entries like any other, since
// go-git does not read that bit; AssumeUnchanged lists them, for remedies
// that must clear it before git sees the edit.)
func (r *Repo) SkipWorktree() ([]string, error) {
	idx, err := r.index()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range idx.Entries {
		if e.SkipWorktree {
			out = append(out, e.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Tracked reports, per path in the index, that git tracks it. Its only
// error is reading or decoding the index file ("reading the index of
// DIR: ..."; a checkout with no index tracks nothing).
func (r *Repo) Tracked() (map[string]bool, error) {
	idx, err := r.index()
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(idx.Entries))
	for _, e := range idx.Entries {
		out[e.Name] = true
	}
	return out, nil
}

// TrackedPaths lists the paths in the index once each, sorted (the
// index's own order, git's byte order of the names): Tracked's paths
// without building a set. Its only error is reading or decoding the
// index file ("reading the index of DIR: ..."; a checkout with no index
// has no paths), as for Tracked.
func (r *Repo) TrackedPaths() ([]string, error) {
	idx, err := r.index()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(idx.Entries))
	for _, e := range idx.Entries {
		if n := len(out); n == 0 || out[n-1] != e.Name { // the stages of an unmerged path are adjacent
			out = append(out, e.Name)
		}
	}
	return out, nil
}

// Fetch updates refs/remotes/origin/* from the origin remote.
func (r *Repo) Fetch(ctx context.Context, progress io.Writer) error {
	err := r.r.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", Progress: progress, Tags: git.NoTags})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return cloneError(r.remoteURL(), err)
	}
	return nil
}

// TreeAt returns read access to the files of commit, from the object store,
// with no checkout. The error names the commit when it is missing.
func (r *Repo) TreeAt(commit string) (*CommitTree, error) {
	root, err := r.commitTreeHash(plumbing.NewHash(commit))
	if err != nil {
		return nil, fmt.Errorf("commit %s is not in %s: %w", commit, r.Dir, err)
	}
	return &CommitTree{Commit: commit, repo: r, root: root}, nil
}

// CommitTree reads files of one commit. It implements patches.Tree. Its
// objects come from the repository's objectReader (one binary search and
// inflate per object, as git reads them), or from go-git where that
// reader does not take them.
type CommitTree struct {
	Commit string
	repo   *Repo
	root   plumbing.Hash
}

// entry returns the tree entry at path; an error wrapping fs.ErrNotExist
// when the commit has no such entry (or path is not a valid tree path).
func (c *CommitTree) entry(p string) (object.TreeEntry, error) {
	missing := fmt.Errorf("%s at %s: %w", p, githash.Hash(c.Commit).Short(), fs.ErrNotExist)
	parts := strings.Split(p, "/")
	dir := c.root
	for i, name := range parts {
		if name == "" || name == "." || name == ".." {
			return object.TreeEntry{}, missing
		}
		ents, err := c.tree(dir)
		if err != nil {
			return object.TreeEntry{}, err
		}
		j := slices.IndexFunc(ents, func(e object.TreeEntry) bool { return e.Name == name })
		switch {
		case j < 0:
			return object.TreeEntry{}, missing
		case i == len(parts)-1:
			return ents[j], nil
		case ents[j].Mode != filemode.Dir:
			return object.TreeEntry{}, missing
		}
		dir = ents[j].Hash
	}
	return object.TreeEntry{}, missing
}

func (c *CommitTree) tree(h plumbing.Hash) ([]object.TreeEntry, error) {
	ents, err := c.repo.treeEntries(h)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", githash.Hash(c.Commit).Short(), err)
	}
	return ents, nil
}

// ReadFile returns the blob at path, an error wrapping fs.ErrNotExist when
// the commit has no such file (a directory or submodule there included),
// or an error for a symlink.
func (c *CommitTree) ReadFile(path string) ([]byte, error) {
	e, err := c.entry(path)
	if err != nil {
		return nil, err
	}
	switch e.Mode {
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
	case filemode.Dir, filemode.Submodule:
		return nil, fmt.Errorf("%s at %s: %w", path, githash.Hash(c.Commit).Short(), fs.ErrNotExist)
	default:
		return nil, fmt.Errorf("%s at %s is not a regular file (mode %s)", path, githash.Hash(c.Commit).Short(), e.Mode)
	}
	b, err := c.repo.blob(e.Hash)
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", path, githash.Hash(c.Commit).Short(), err)
	}
	return b, nil
}

// BlobID returns the blob id (hex) of the file at path, read from the
// commit's trees without reading the blob: "" for a symlink or any other
// entry ReadFile refuses (the caller reads it and gets ReadFile's error),
// and an error wrapping fs.ErrNotExist where ReadFile gives one
// (patches.BlobTree: the gate rule's cached answers are found by it).
func (c *CommitTree) BlobID(path string) (string, error) {
	e, err := c.entry(path)
	if err != nil {
		return "", err
	}
	switch e.Mode {
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
		return e.Hash.String(), nil
	case filemode.Dir, filemode.Submodule:
		return "", fmt.Errorf("%s at %s: %w", path, githash.Hash(c.Commit).Short(), fs.ErrNotExist)
	}
	return "", nil
}

// IsDir reports whether path is a directory of the commit (the gate
// rule's Python judge asks it, as Python asks the filesystem).
func (c *CommitTree) IsDir(path string) bool {
	e, err := c.entry(path)
	return err == nil && e.Mode == filemode.Dir
}

// Mode returns the git mode of path at the commit ("100644", "100755"), or
// "" when absent.
func (c *CommitTree) Mode(path string) string {
	e, err := c.entry(path)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(e.Mode.String(), "0")
}

// Paths lists every file of the commit (slash paths, sorted; submodules
// are not files and are left out).
func (c *CommitTree) Paths() ([]string, error) {
	return c.files(func(string) bool { return true })
}

// Named lists the files of the commit whose last path element is base
// (slash paths, sorted), building no path for the others: what the
// built-in rule asks of every commit `patches check` judges
// (patches.Lister).
func (c *CommitTree) Named(base string) ([]string, error) {
	return c.files(func(name string) bool { return name == base })
}

// files lists the files of the commit whose name keep takes.
func (c *CommitTree) files(keep func(name string) bool) ([]string, error) {
	var out []string
	var walk func(h plumbing.Hash, prefix string) error
	walk = func(h plumbing.Hash, prefix string) error {
		ents, err := c.tree(h)
		if err != nil {
			return err
		}
		for _, e := range ents {
			switch e.Mode {
			case filemode.Dir:
				if err := walk(e.Hash, prefix+e.Name+"/"); err != nil {
					return err
				}
			case filemode.Submodule:
			default:
				if keep(e.Name) {
					out = append(out, prefix+e.Name)
				}
			}
		}
		return nil
	}
	if err := walk(c.root, ""); err != nil {
		return nil, fmt.Errorf("listing the files of %s: %w", githash.Hash(c.Commit).Short(), err)
	}
	sort.Strings(out)
	return out, nil
}

// PrefixError is an abbreviated hash Rev that names no commit of the
// repository Dir, or more than one (Candidates, full hashes, sorted).
// The second is a usage error (it wraps ErrAbbreviated), with the command
// that lists the objects the prefix names as it runs from the current
// directory, `git -C DIR rev-parse --disambiguate=REV`, Dir the
// repository as the user named it (apply's clone renames it so). apply,
// patches check, port and the nightly all print it through Resolve.
type PrefixError struct {
	Dir, Rev   string
	Candidates []string
}

func (e *PrefixError) Error() string {
	if len(e.Candidates) == 0 {
		return fmt.Sprintf("no commit of %s starts with %s; fetch it there first, or check the hash", e.Dir, e.Rev)
	}
	return fmt.Sprintf("the abbreviated hash %q names more than one commit in %s (%s); pass more hex digits or the full 40-hex hash (`git -C %s rev-parse --disambiguate=%s` lists the objects it names)",
		e.Rev, e.Dir, strings.Join(e.Candidates, ", "), shellq.Quote(e.Dir), shellq.Quote(e.Rev))
}

// Unwrap is ErrAbbreviated for an ambiguous prefix (a usage error).
func (e *PrefixError) Unwrap() error {
	if len(e.Candidates) > 1 {
		return ErrAbbreviated
	}
	return nil
}

// expandPrefix resolves an abbreviated hash (4 to 39 hex digits, lower
// case) as git does for a commit-ish: the one commit, or annotated tag
// of a commit, whose hash starts with it; other objects with that prefix
// (blobs, trees) do not make it ambiguous (git's disambiguation by the
// type asked for, get_oid with GET_OID_COMMITTISH). None, or more than
// one, is a *PrefixError.
func (r *Repo) expandPrefix(rev string) (string, error) {
	even, err := hex.DecodeString(rev[:len(rev)&^1])
	if err != nil {
		return "", fmt.Errorf("%q is not a hex hash", rev)
	}
	var hashes []plumbing.Hash
	if fi, ok := r.r.Storer.(interface {
		HashesWithPrefix([]byte) ([]plumbing.Hash, error)
	}); ok {
		if hashes, err = fi.HashesWithPrefix(even); err != nil {
			return "", fmt.Errorf("%s: looking up the objects that start with %s: %w", r.Dir, rev, err)
		}
	} else {
		iter, err := r.r.Storer.IterEncodedObjects(plumbing.AnyObject)
		if err != nil {
			return "", err
		}
		err = iter.ForEach(func(o plumbing.EncodedObject) error {
			if h := o.Hash(); bytes.HasPrefix(h[:], even) {
				hashes = append(hashes, h)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	seen := map[string]bool{}
	var commits []string
	for _, h := range hashes {
		if !strings.HasPrefix(h.String(), rev) {
			continue // the odd digit
		}
		c := h
		if tag, err := r.r.TagObject(h); err == nil {
			tc, err := tag.Commit()
			if err != nil {
				continue
			}
			c = tc.Hash
		} else if _, err := r.r.CommitObject(h); err != nil {
			continue
		}
		if !seen[c.String()] {
			seen[c.String()] = true
			commits = append(commits, c.String())
		}
	}
	sort.Strings(commits)
	if len(commits) == 1 {
		return commits[0], nil
	}
	return "", &PrefixError{Dir: r.Dir, Rev: rev, Candidates: commits}
}
