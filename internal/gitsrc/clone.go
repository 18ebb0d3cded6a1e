// Package gitsrc is arpatch's access to SGLang git repositories, through
// go-git: clone (with a hardlinking fast path for local repositories, as
// `git clone --local` does), check out a pinned commit detached, list
// uncommitted changes, resolve refs, and read files at a commit without a
// checkout. It knows nothing about patches or recipes.
package gitsrc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/arpatch/arpatch/internal/gitsrc/gitdir"
)

// CloneInfo says how a clone was made.
type CloneInfo struct {
	Source   string        // the URL or path cloned from
	Local    bool          // true when objects were hardlinked or copied from a local repository
	Duration time.Duration // wall time of the clone, checkout excluded
	// Checkout is the wall time of checking out the work tree after the
	// clone, and Files the files it wrote (0 and 0 when the caller
	// checked nothing out).
	Checkout time.Duration
	Files    int
	// Linked and Copied count the object files of a local clone that were
	// hardlinked and copied (a hardlink needs the same file system).
	Linked, Copied int
}

// How says how a local clone got its objects: "objects hardlinked",
// "objects copied (N files: hardlinks need the same file system)", or both
// counts.
func (i CloneInfo) How() string {
	switch {
	case !i.Local:
		return "over the network"
	case i.Copied == 0:
		return "local: objects hardlinked"
	case i.Linked == 0:
		return fmt.Sprintf("local: objects copied (%d files: hardlinks need the same file system)", i.Copied)
	}
	return fmt.Sprintf("local: %d object files hardlinked, %d copied", i.Linked, i.Copied)
}

// NoRepoError is a local path named as a repository (a clone's source,
// --repo) that holds none: Missing when nothing is there at all, so that
// the caller can say how to make one.
type NoRepoError struct {
	Path    string // as given
	Missing bool
	// Detail follows "is not a git repository" ("" or " (no objects/ and
	// HEAD found)").
	Detail string
}

func (e *NoRepoError) Error() string {
	if e.Missing {
		return e.Path + " does not exist (no git repository there)"
	}
	return e.Path + " is not a git repository" + e.Detail
}

// Unwrap is fs.ErrNotExist for a path where nothing is.
func (e *NoRepoError) Unwrap() error {
	if e.Missing {
		return fs.ErrNotExist
	}
	return nil
}

// noRepo is the *NoRepoError for path, which holds no repository.
func noRepo(path, detail string) error {
	e := &NoRepoError{Path: path, Detail: detail}
	if p, ok := localPath(path); ok {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			e.Missing = true
		}
	}
	return e
}

// localPath returns the file system path of a file:// URL (or src itself
// when it is no URL), and false for any other URL. file:// is read like
// a path: go-git's file transport would run git-upload-pack, a git binary
// arpatch does not need.
func localPath(src string) (string, bool) {
	if rest, ok := strings.CutPrefix(src, "file://"); ok {
		u, err := url.Parse(src)
		if err != nil || (u.Host != "" && u.Host != "localhost") {
			return "", false
		}
		if u.Path == "" {
			return rest, true
		}
		return u.Path, true
	}
	if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
		return "", false
	}
	return src, true
}

// LocalGitDir returns the git directory that holds the objects of src
// when src is a local repository: a path or file:// URL to a bare
// repository, to a checkout with a .git directory, or to a linked worktree
// (git worktree add; its .git file points into the main repository, whose
// git directory is returned). It returns "" otherwise.
func LocalGitDir(src string) string {
	src, ok := localPath(src)
	if !ok {
		return ""
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return ""
	}
	cands := []string{filepath.Join(abs, ".git"), abs}
	if wt := worktreeCommonDir(filepath.Join(abs, ".git")); wt != "" {
		cands = []string{wt}
	}
	for _, d := range cands {
		if fi, err := os.Stat(filepath.Join(d, "objects")); err == nil && fi.IsDir() {
			if _, err := os.Stat(filepath.Join(d, "HEAD")); err == nil {
				return d
			}
		}
	}
	return ""
}

// worktreeCommonDir reads a linked worktree's .git file ("gitdir: X")
// and X/commondir, returning the main repository's git directory (X
// itself when it has no commondir), or "".
func worktreeCommonDir(dotGit string) string {
	b, err := os.ReadFile(dotGit)
	if err != nil {
		return "" // a directory, or nothing
	}
	gd, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return ""
	}
	gd = strings.TrimSpace(gd)
	if !filepath.IsAbs(gd) {
		gd = filepath.Join(filepath.Dir(dotGit), gd)
	}
	c, err := os.ReadFile(filepath.Join(gd, "commondir"))
	if err != nil {
		// No commondir: the .git file points at a whole git directory
		// (git clone --separate-git-dir, a submodule).
		return filepath.Clean(gd)
	}
	common := strings.TrimSpace(string(c))
	if !filepath.IsAbs(common) {
		common = filepath.Join(gd, common)
	}
	return filepath.Clean(common)
}

// Clone clones src into dir, which must not exist or be an empty
// directory (as for git clone: git/git builtin/clone.c@v2.39.5, cmd_clone,
// "destination path ... already exists and is not an empty directory"),
// without checking out a work tree; call
// Checkout next. A local repository (a path or a file://
// URL) is cloned by hardlinking its object files (copying where links
// fail, counted in CloneInfo), like `git clone --local`; other URLs go
// through go-git's transports. progress, when not nil, receives go-git's progress text. On
// failure dir is removed (emptied, when it was there before) and the
// error says what to do: a network or
// authentication failure suggests --repo with a local mirror.
func Clone(ctx context.Context, src, dir string, progress io.Writer) (*Repo, CloneInfo, error) {
	info := CloneInfo{Source: src}
	existed := false
	if _, err := os.Lstat(dir); err == nil {
		if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
			return nil, info, fmt.Errorf("clone into %s: the directory already exists and is not empty", dir)
		}
		existed = true
	}
	start := time.Now()
	var repo *git.Repository
	var err error
	if gd := LocalGitDir(src); gd != "" {
		info.Local = true
		repo, info.Linked, info.Copied, err = cloneLocal(gd, src, dir)
	} else {
		if p, ok := localPath(src); ok && (strings.HasPrefix(p, "/") || strings.HasPrefix(p, ".")) {
			err = noRepo(src, " (no objects/ and HEAD found)")
		} else {
			repo, err = git.PlainCloneContext(ctx, dir, false, &git.CloneOptions{
				URL:        src,
				NoCheckout: true,
				Progress:   progress,
				Tags:       git.NoTags,
			})
			if err == nil {
				err = cloneOriginHead(repo, dir)
			}
		}
	}
	info.Duration = time.Since(start)
	if err != nil {
		// The partial clone; cloneError is what the user must see.
		if existed {
			_ = removeContents(dir)
		} else {
			_ = os.RemoveAll(dir)
		}
		return nil, info, cloneError(src, err)
	}
	return &Repo{Dir: dir, r: repo}, info, nil
}

// removeContents removes everything in dir, keeping dir.
func removeContents(dir string) error {
	ents, err := os.ReadDir(dir)
	for _, e := range ents {
		if rerr := os.RemoveAll(filepath.Join(dir, e.Name())); err == nil {
			err = rerr
		}
	}
	return err
}

func cloneError(src string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("clone %s: interrupted; nothing was kept", src)
	}
	msg := err.Error()
	hint := ""
	var netHint bool
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		netHint = true
	case errors.Is(err, transport.ErrRepositoryNotFound):
		hint = "check the URL, or clone from a local mirror with --repo PATH"
	case strings.Contains(msg, "dial tcp"), strings.Contains(msg, "no such host"), strings.Contains(msg, "connection refused"),
		strings.Contains(msg, "i/o timeout"), strings.Contains(msg, "network is unreachable"), strings.Contains(msg, "TLS"):
		netHint = true
	}
	if netHint {
		hint = "this machine cannot fetch from it; on a machine with network run `git clone --mirror " + src + " sglang.git`, copy it here, and pass --repo sglang.git"
	}
	if u, perr := url.Parse(src); perr == nil && u.Scheme == "file" && hint == "" {
		hint = "check that " + u.Path + " is a git repository"
	}
	if hint == "" {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	return fmt.Errorf("clone %s: %w\n  remedy: %s", src, err, hint)
}

// cloneLocal makes a repository at dir whose objects are hardlinks to (or
// copies of) the source's pack and loose object files, with the source's
// branches as refs/remotes/origin/* and its tags, like `git clone --local`.
//
// It writes only what git and go-git read (gitdir.Create: HEAD, config,
// objects/, refs/), the refs in one packed-refs file as git clone writes
// them, refs/remotes/origin/HEAD (a symref, which packed-refs cannot
// hold), and the object directories that hold files. go-git's PlainInit
// would add objects/info, refs/heads and refs/tags, empty, and every ref
// as its own file under refs/remotes/origin/ (three files and
// directories for one branch): each an inode that a clone's creation and
// removal pay for, which neither git (2.39: fsck, status, checkout) nor
// go-git needs.
func cloneLocal(srcGitDir, srcLabel, dir string) (repo *git.Repository, linked, copied int, err error) {
	src, err := plainOpen(srcGitDir, false)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open %s: %w", srcGitDir, err)
	}
	gitDir := filepath.Join(dir, ".git")
	label, _ := localPath(srcLabel)
	abs, _ := filepath.Abs(label)
	cfg := config.NewConfig()
	cfg.Remotes["origin"] = &config.RemoteConfig{
		Name:  "origin",
		URLs:  []string{abs},
		Fetch: []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*"},
	}
	if err := gitdir.Create(gitDir, cfg); err != nil {
		return nil, 0, 0, err
	}
	if linked, copied, err = linkTree(filepath.Join(srcGitDir, "objects"), filepath.Join(gitDir, "objects")); err != nil {
		return nil, 0, 0, fmt.Errorf("link objects from %s: %w", srcGitDir, err)
	}
	if err := cloneRefs(src, srcGitDir, gitDir); err != nil {
		return nil, 0, 0, err
	}
	// Open now, so go-git indexes the packs that were linked in (and
	// reads the alternates copied with them).
	repo, err = plainOpen(dir, false)
	return repo, linked, copied, err
}

// cloneRefs writes a local clone's shallow file when the source has one,
// and its packed-refs: the source's branches as refs/remotes/origin/*, its
// tags and remote-tracking refs as they are (a branch wins over a
// remote-tracking ref of the same name in the clone, as it names what
// origin has), symbolic refs left out; then refs/remotes/origin/HEAD, a
// symref to the source's HEAD branch, as git clone writes it
// (git/git builtin/clone.c@v2.39.5, update_remote_refs).
func cloneRefs(src *git.Repository, srcGitDir, gitDir string) error {
	if b, err := os.ReadFile(filepath.Join(srcGitDir, "shallow")); err == nil {
		if err := os.WriteFile(filepath.Join(gitDir, "shallow"), b, 0o644); err != nil {
			return err
		}
	}
	refs, err := src.References()
	if err != nil {
		return err
	}
	packed := map[plumbing.ReferenceName]plumbing.Hash{}
	fromBranch := map[plumbing.ReferenceName]bool{}
	err = refs.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() != plumbing.HashReference {
			return nil
		}
		name := ref.Name()
		switch {
		case name.IsBranch():
			name = plumbing.NewRemoteReferenceName("origin", name.Short())
			fromBranch[name] = true
		case name.IsTag(), name.IsRemote():
			if fromBranch[name] {
				return nil
			}
		default:
			return nil
		}
		packed[name] = ref.Hash()
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gitDir, "packed-refs"), packedRefs(packed), 0o644); err != nil {
		return err
	}
	// refs/remotes/origin/HEAD (a loose file; packed-refs holds no
	// symref) to the source's HEAD branch. A source whose HEAD is
	// detached or unborn gets none.
	head, err := src.Reference(plumbing.HEAD, false)
	if err != nil || head.Type() != plumbing.SymbolicReference || !head.Target().IsBranch() {
		return nil
	}
	remote := plumbing.NewRemoteReferenceName("origin", head.Target().Short())
	if !fromBranch[remote] {
		return nil
	}
	return writeOriginHead(gitDir, remote)
}

// writeOriginHead writes refs/remotes/origin/HEAD in gitDir: a symref to
// remote (refs/remotes/origin/NAME), a loose file as git clone writes it
// (git/git builtin/clone.c@v2.39.5, update_remote_refs), so that `origin`
// names a revision (git log origin). It returns the error making the
// directory or writing the file.
func writeOriginHead(gitDir string, remote plumbing.ReferenceName) error {
	dir := filepath.Join(gitDir, "refs", "remotes", "origin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "HEAD"), []byte("ref: "+remote+"\n"), 0o644)
}

// cloneOriginHead gives a clone that go-git made (which writes no
// refs/remotes/origin/HEAD) the one git clone writes: to origin's branch
// that the clone's HEAD names (go-git sets HEAD to the remote HEAD's
// branch). A detached HEAD, or a branch origin lacks, gets none.
func cloneOriginHead(repo *git.Repository, dir string) error {
	head, err := repo.Storer.Reference(plumbing.HEAD)
	if err != nil || head.Type() != plumbing.SymbolicReference || !head.Target().IsBranch() {
		return nil
	}
	remote := plumbing.NewRemoteReferenceName("origin", head.Target().Short())
	if _, err := repo.Storer.Reference(remote); err != nil {
		return nil
	}
	return writeOriginHead(filepath.Join(dir, ".git"), remote)
}

// packedRefs is the text of a packed-refs file holding refs, sorted by
// name as its "sorted" trait says (git's refs/packed-backend.c reads it;
// without the "peeled" trait git peels annotated tags itself).
func packedRefs(refs map[plumbing.ReferenceName]plumbing.Hash) []byte {
	names := make([]string, 0, len(refs))
	for n := range refs {
		names = append(names, string(n))
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("# pack-refs with: sorted \n")
	for _, n := range names {
		b.WriteString(refs[plumbing.ReferenceName(n)].String() + " " + n + "\n")
	}
	return []byte(b.String())
}

// linkTree hardlinks every regular file under src into dst, copying when a
// hardlink is not possible (another file system). Object files are
// immutable in git, so sharing them is safe. It makes dst and the
// directories that receive a file, not the empty ones (objects/info of a
// repository without alternates).
func linkTree(src, dst string) (linked, copied int, err error) {
	made := map[string]bool{}
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if rel == "." {
			made[target] = true
			return os.MkdirAll(target, 0o755)
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		if parent := filepath.Dir(target); !made[parent] {
			if err := os.MkdirAll(parent, 0o755); err != nil {
				return err
			}
			made[parent] = true
		}
		if rel == filepath.Join("info", "alternates") {
			return copyAlternates(src, p, target)
		}
		if err := linkFile(p, target); err == nil {
			linked++
			return nil
		}
		copied++
		return copyFile(p, target)
	})
	return linked, copied, err
}

// linkFile is os.Link; tests make it fail as across file systems (EXDEV).
var linkFile = os.Link

// copyAlternates rewrites relative alternate paths so they still resolve
// from the new repository.
func copyAlternates(srcObjects, p, target string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && !filepath.IsAbs(l) {
			l = filepath.Join(srcObjects, l)
		}
		out = append(out, l)
	}
	return os.WriteFile(target, []byte(strings.Join(out, "\n")+"\n"), 0o644)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }() // read-only: Close has nothing to report
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy's error is the one to report
		return err
	}
	return out.Close()
}
