package checkout

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/patches"
)

// sameAsHead checks the checkout against commit head before any write,
// for what git status does not show: every mode a patch header claims
// (old mode, deleted file mode, an index line's mode) is head's, else an
// error names the patch and file and runs checkCmd as the remedy; no
// file the series creates is there already (untracked or ignored), else
// an error gives the mv that moves it away; and every file the series
// touches holds head's bytes: one that differs only by CRLF line endings
// gets lineEndingError, others (an edit hidden by skip-worktree or
// assume-unchanged) an error with the git update-index command that
// clears the bits. Patching over any of them would record the user's
// bytes as upstream's.
func sameAsHead(repo *gitsrc.Repo, head string, root safefs.Root, ps []*patches.Patch, checkCmd string) error {
	tree, err := repo.TreeAt(head)
	if err != nil {
		return err
	}
	var differ, extra, eol []string
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			// One rule for every header that claims the old mode (old
			// mode, deleted file mode, index ... MODE): the commit must
			// have it. git apply only warns; arpatch refuses by name.
			have := tree.Mode(fc.Path)
			check := "`" + checkCmd + "`"
			switch {
			case fc.OldMode != "" && have != fc.OldMode:
				return fmt.Errorf("patch %s changes the mode of %s from %s, but commit %s has it as %s; nothing was changed. Use a series made for this commit (%s)",
					p.Name, fc.Path, fc.OldMode, githash.Hash(head).Short(), cmp.Or(have, "(none)"), check)
			case fc.ModeClaim != "" && have != "" && have != fc.ModeClaim:
				return fmt.Errorf("patch %s says %s has mode %s (%q), but commit %s has it as %s; nothing was changed (git apply would only warn \"has type %s, expected %s\"; arpatch refuses a wrong mode claim in any header, as for \"old mode\"). Use a series made for this commit (%s)",
					p.Name, fc.Path, fc.ModeClaim, fc.ModeClaimBy, githash.Hash(head).Short(), have, strings.TrimLeft(have, "0"), strings.TrimLeft(fc.ModeClaim, "0"), check)
			}
		}
	}
	if err := pathKinds(tree, head, root.Dir, ps, checkCmd); err != nil {
		return err
	}
	for p := range seriesFiles(ps) {
		want, werr := tree.ReadFile(p)
		got, gerr := root.ReadFile(p)
		if errors.Is(werr, fs.ErrNotExist) && errors.Is(gerr, fs.ErrNotExist) {
			continue
		}
		var pe *safefs.PathError
		if errors.As(gerr, &pe) {
			return gerr
		}
		if gerr != nil && !errors.Is(gerr, fs.ErrNotExist) {
			return fmt.Errorf("%s: %s cannot be read: %s; nothing was changed. Fix that (its permissions), then apply", root.Dir, p, cause(gerr))
		}
		if werr != nil && !errors.Is(werr, fs.ErrNotExist) {
			return fmt.Errorf("%s: %v; nothing was changed. The series was made for another tree: `%s` shows which series fits commit %s", root.Dir, werr, checkCmd, githash.Hash(head).Short())
		}
		switch {
		case errors.Is(werr, fs.ErrNotExist) && gerr == nil:
			extra = append(extra, p)
		case werr == nil && gerr == nil && !bytes.Equal(want, got) && bytes.Equal(crlf(want), got):
			eol = append(eol, p)
		case werr != nil || gerr != nil || !bytes.Equal(want, got):
			differ = append(differ, p)
		}
	}
	if len(eol) > 0 && len(differ) == 0 {
		return lineEndingError(root.Dir, head, eol)
	}
	differ = append(differ, eol...)
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("%s: the series creates %s, but the tree already has a file there that commit %s does not (untracked or ignored); nothing was changed. Move it away (`%s`), then apply",
			root.Dir, strings.Join(extra, ", "), githash.Hash(head).Short(), shellq.Join([]string{"mv", filepath.Join(root.Dir, extra[0]), filepath.Join(root.Dir, extra[0]) + ".mine"}))
	}
	if len(differ) == 0 {
		return nil
	}
	sort.Strings(differ)
	return fmt.Errorf("%s: these files differ from commit %s although git status does not list them (skip-worktree or assume-unchanged bits hide the edit): %s; nothing was changed. Clear the bits (`%s`), then stash or restore the edits",
		root.Dir, githash.Hash(head).Short(), strings.Join(differ, ", "), unhide(root.Dir, differ))
}

func gitMode(m string) fs.FileMode {
	if m == "100755" {
		return 0o755
	}
	return 0o644
}

// crlf returns b with every LF that has no CR before it turned into CRLF,
// as git's core.autocrlf=true writes a text file on checkout.
func crlf(b []byte) []byte {
	out := make([]byte, 0, len(b)+bytes.Count(b, []byte("\n")))
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

// lineEndings returns a *lineEndingError when every one of the tracked
// changes is a file holding HEAD's text with CRLF where HEAD has LF: what
// a checkout by git with core.autocrlf=true looks like. Otherwise nil.
func lineEndings(repo *gitsrc.Repo, head string, root safefs.Root, changes []gitsrc.Change) error {
	tree, err := repo.TreeAt(head)
	if err != nil {
		return nil
	}
	var paths []string
	for _, c := range changes {
		want, werr := tree.ReadFile(c.Path)
		got, gerr := root.ReadFile(c.Path)
		if werr != nil || gerr != nil || bytes.Equal(want, got) || !bytes.Equal(crlf(want), got) {
			return nil
		}
		paths = append(paths, c.Path)
	}
	return lineEndingError(root.Dir, head, paths)
}

// lineEndingError is the refusal for files git converted to CRLF on
// checkout. The remedy rewrites those files from HEAD, which loses
// nothing: it is given only when the conversion is all that differs. It
// drops their index entries first: `git checkout HEAD -- PATH` keeps an
// entry whose blob is HEAD's, with its stat data, and skips a file that
// stat data calls clean, as a converted file is once the index is no
// longer racy, so the CRLF would stay (seen with git 2.39.5 after
// `git update-index --refresh`; refusals.txtar makes that case).
func lineEndingError(src, head string, paths []string) error {
	sort.Strings(paths)
	return fmt.Errorf("%s: these files hold commit %s's text with CRLF line endings where the commit has LF: %s. Git converted them when it checked them out (core.autocrlf=true, or a .gitattributes eol/text rule); the patches are written against the commit's bytes, so nothing was changed. "+
		"Turn the conversion off for this checkout and write those files again (the conversion is the only difference, so nothing is lost): `%s`, then `%s`, then `%s`, then apply",
		src, githash.Hash(head).Short(), strings.Join(paths, ", "), sh("git", "-C", src, "config", "core.autocrlf", "false"),
		sh(append([]string{"git", "-C", src, "rm", "-q", "--cached", "--"}, paths...)...), sh(append([]string{"git", "-C", src, "checkout", "HEAD", "--"}, paths...)...))
}
