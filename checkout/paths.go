package checkout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/patches"
)

// gitDirMode is the mode CommitTree.Mode gives a directory.
const gitDirMode = "040000"

// pathKinds refuses, before anything is read or written, a series that
// writes where the tree's paths cannot take it, naming the cause as git
// does ("Not a directory", "Is a directory"): a file it creates or edits
// under a path that is a file (in commit head and not deleted by the
// series; created by an earlier change of the series; or untracked in
// the checkout), and a file it creates where a directory is (in head, or
// untracked in the checkout). It refuses too, stricter than git apply, a
// directory made in the place of a file the series deletes: the apply
// state records files, and a path that is a file before and a directory
// after is neither to status and revert. A path the checkout
// cannot look at (permission denied, a name too long) is refused with the
// system's words. checkCmd is the `patches check` remedy for a series
// made for another tree; src is the checkout's directory.
func pathKinds(tree *gitsrc.CommitTree, head, src string, ps []*patches.Patch, checkCmd string) error {
	created, deleted := finalPaths(ps)
	short := githash.Hash(head).Short()
	nameMax := fsNameMax(src)
	// refuse words a refusal: the patch, the change, why, and the remedy.
	refuse := func(p *patches.Patch, fc *patches.FileChange, why, remedy string) error {
		verb := "edits"
		if fc.Op == patches.Create {
			verb = "creates"
		}
		return fmt.Errorf("patch %s %s %s, but %s; nothing was changed. %s", p.Name, verb, fc.Path, why, remedy)
	}
	other := fmt.Sprintf("The series was made for another tree: `%s` shows which series fits commit %s", checkCmd, short)
	moveAway := func(rel string) string {
		return fmt.Sprintf("Move it away (`%s`), then apply", sh("mv", filepath.Join(src, rel), filepath.Join(src, rel)+".mine"))
	}
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			if fc.Op == patches.Delete {
				continue
			}
			parts := strings.Split(fc.Path, "/")
			for _, name := range parts {
				if len(name) > nameMax {
					return refuse(p, fc, fmt.Sprintf("its name %.20s... is %d bytes, more than the %d the checkout's file system takes: File name too long", name, len(name), nameMax),
						"The series cannot be applied on this file system")
				}
			}
			for i := 1; i < len(parts); i++ {
				a := strings.Join(parts[:i], "/")
				switch m := tree.Mode(a); {
				case created[a] != "":
					return refuse(p, fc, fmt.Sprintf("%s is a file the series creates (patch %s): Not a directory", a, created[a]), "A series cannot create both; mend it")
				case m != "" && m != gitDirMode && deleted[a]:
					return refuse(p, fc, fmt.Sprintf("%s is a file in commit %s that the series deletes: arpatch does not put a directory in a file's place (git apply does; status and revert could not tell the two apart)", a, short),
						"Split the change: one series deletes the file, a later one creates the directory")
				case m != "" && m != gitDirMode:
					return refuse(p, fc, fmt.Sprintf("%s is a file in commit %s: Not a directory", a, short), other)
				case m == "":
					fi, err := os.Lstat(filepath.Join(src, filepath.FromSlash(a)))
					switch {
					case err == nil && fi.Mode()&fs.ModeSymlink != 0:
						// safefs refuses a path through a symlink, naming it.
					case err == nil && !fi.IsDir():
						return refuse(p, fc, fmt.Sprintf("%s is a file in the tree (untracked or ignored), which commit %s does not have: Not a directory", a, short), moveAway(a))
					case err != nil && !errors.Is(err, fs.ErrNotExist):
						return refuse(p, fc, fmt.Sprintf("%s cannot be looked at: %s", a, cause(err)), "Fix that (its permissions, its name), then apply")
					}
				}
			}
			if fc.Op != patches.Create {
				continue
			}
			if tree.Mode(fc.Path) == gitDirMode {
				return refuse(p, fc, fmt.Sprintf("%s is a directory in commit %s: Is a directory", fc.Path, short), other)
			}
			fi, err := os.Lstat(filepath.Join(src, filepath.FromSlash(fc.Path)))
			switch {
			case err == nil && fi.IsDir():
				return refuse(p, fc, fmt.Sprintf("%s is a directory in the tree (untracked or ignored), which commit %s does not have: Is a directory", fc.Path, short), moveAway(fc.Path))
			case err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
				return refuse(p, fc, fmt.Sprintf("%s cannot be looked at: %s", fc.Path, cause(err)), "Fix that (its permissions, its name), then apply")
			}
		}
	}
	return nil
}

// finalPaths returns the paths ps (a series, in order) creates, each
// with the patch that creates it, and those it deletes, as the series'
// final tree has them.
func finalPaths(ps []*patches.Patch) (created map[string]string, deleted map[string]bool) {
	created, deleted = map[string]string{}, map[string]bool{}
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			switch fc.Op {
			case patches.Create:
				created[fc.Path] = p.Name
				delete(deleted, fc.Path)
			case patches.Delete:
				deleted[fc.Path] = true
				delete(created, fc.Path)
			}
		}
	}
	return created, deleted
}

// fsNameMax is the longest file name, in bytes, that src's file system
// takes: statfs's, else 255 (NAME_MAX of Linux's file systems).
func fsNameMax(src string) int {
	var sfs unix.Statfs_t
	if unix.Statfs(src, &sfs) == nil && sfs.Namelen > 0 {
		return int(sfs.Namelen)
	}
	return 255
}

// cause is an os error's cause in the system's words, capitalised as git
// prints them: "Permission denied", "File name too long".
func cause(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		return strings.ToUpper(s[:1]) + s[1:]
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
