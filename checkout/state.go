// Package checkout applies a recipe's patch series to an SGLang checkout
// and undoes it: clone at the pinned commit, refuse dirty or mismatched
// trees, apply all-or-nothing, record apply state in .git/arpatch/, report
// status and drift, and revert to upstream's exact bytes. It builds on
// patches (series and engine), gitsrc (git) and safefs (atomic writes).
package checkout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/patches"
)

// StateSchema is the version of state.json's layout. Version 2 added the
// digest; a version 1 state is still read, checked by everything but it.
const StateSchema = 2

// State is what apply records inside the checkout's .git/arpatch/state.json,
// where git status does not see it. status and revert read it.
type State struct {
	Schema         int          `json:"schema"`
	Recipe         string       `json:"recipe"`
	RecipeSource   string       `json:"recipe_source"`
	RecipeSHA256   string       `json:"recipe_sha256"`
	UpstreamURL    string       `json:"upstream_url"`
	Commit         string       `json:"commit"`
	Series         string       `json:"series,omitempty"`
	SeriesSource   string       `json:"series_source,omitempty"`
	SeriesReason   string       `json:"series_reason,omitempty"`
	Patches        []PatchState `json:"patches"`
	Files          []FileState  `json:"files"`
	Offsets        []Offset     `json:"offsets,omitempty"`
	ArpatchVersion string       `json:"arpatch_version"`
	AppliedAt      time.Time    `json:"applied_at"`
	// Incomplete is set while apply writes files: a state found with it
	// set means an apply was killed part way. status reports it, apply
	// refuses, revert restores every listed file.
	Incomplete bool `json:"incomplete,omitempty"`
	// Reverting is set while revert restores files: a state found with it
	// set means a revert was killed part way. status reports it, apply
	// refuses, and revert, run again, finishes the job.
	Reverting bool `json:"reverting,omitempty"`
	// Digest is the hex sha256 of the state's JSON with Digest empty: a
	// state edited by hand no longer matches it.
	Digest string `json:"digest"`
}

// RecipeFile is the path of the recipe file the series was applied from,
// or "" for an embedded recipe.
func (s *State) RecipeFile() string {
	if strings.HasPrefix(s.RecipeSource, "embedded:") {
		return ""
	}
	return s.RecipeSource
}

// PatchState records one applied patch.
type PatchState struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// FileState records one changed file: its op, the sha256 of its bytes
// before and after (empty when absent), and its mode when the series
// changed it.
type FileState struct {
	Path   string `json:"path"`
	Op     string `json:"op"`
	Before string `json:"before_sha256,omitempty"`
	After  string `json:"after_sha256,omitempty"`
	// OldMode and Mode are set when the series changed the file's mode
	// (git modes, "100644" to "100755" or back); revert restores the
	// commit's mode.
	OldMode string `json:"old_mode,omitempty"`
	Mode    string `json:"mode,omitempty"`
}

// Offset records a hunk that landed away from its header's line.
type Offset struct {
	Patch  string `json:"patch"`
	Path   string `json:"path"`
	Hunk   string `json:"hunk"`
	Offset int    `json:"offset"`
}

// StatePath returns where the state of the checkout with git directory
// gitDir lives.
func StatePath(gitDir string) string {
	return filepath.Join(gitDir, "arpatch", "state.json")
}

// StateError is an apply state that cannot be trusted: it does not parse,
// disagrees with itself, with its digest, with the upstream commit it
// names, or with the series and patch hashes it names. Nothing is changed
// on the strength of such a state.
type StateError struct {
	File    string // the state file
	Src     string // the checkout, when known (for the remedy)
	Problem string
	// Schema is set when the state is another version's, not damaged.
	Schema int
	// Restore are the tracked files (repository-relative) to put back
	// from HEAD, and Remove the files apply created, to delete: those the
	// state or its series names that git status shows changed, or, when
	// neither names any, every changed tracked file. See damagedFiles.
	Restore, Remove []string
}

func (e *StateError) Error() string {
	if e.Schema != 0 {
		return fmt.Sprintf("%s: schema %d, this arpatch reads %d; use the arpatch that applied it to revert", e.File, e.Schema, StateSchema)
	}
	src := e.Src
	if src == "" {
		src = "."
	}
	// A damaged state cannot say which files apply changed: git can, and
	// only those should go back (not the user's other edits). Each
	// command runs as printed.
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s; the apply state is damaged or was edited, so arpatch will not act on it and changed nothing. "+
		"See what apply changed with `%s`, ", e.File, e.Problem, shellq.Join([]string{"git", "-C", src, "status", "--short"}))
	if len(e.Restore) > 0 {
		fmt.Fprintf(&b, "put back the files it changed (`%s`; this loses edits to them), ",
			shellq.Join(append([]string{"git", "-C", src, "checkout", "HEAD", "--"}, e.Restore...)))
	}
	if len(e.Remove) > 0 {
		words := []string{"rm", "--"}
		for _, f := range e.Remove {
			words = append(words, filepath.Join(src, filepath.FromSlash(f)))
		}
		fmt.Fprintf(&b, "remove the files it created (`%s`), ", shellq.Join(words))
	}
	if len(e.Restore)+len(e.Remove) == 0 {
		b.WriteString("(git shows no file changed that apply could have written), ")
	}
	fmt.Fprintf(&b, "then remove the state: `%s`", shellq.Join([]string{"rm", e.File}))
	return b.String()
}

// ReadState returns the checkout's apply state, or (nil, nil) when there is
// none. It checks the state against itself: it must parse, carry this
// schema, name a full commit and the recipe's sha256, hold clean, distinct paths with ops and
// sha256s that agree (a created file has no before, a deleted one no
// after), list files exactly when it lists patches, and match its digest.
// A state that fails is a *StateError.
func ReadState(gitDir string) (*State, error) {
	p := StatePath(gitDir)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	damaged := func(format string, args ...any) error {
		return &StateError{File: p, Problem: fmt.Sprintf(format, args...)}
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, damaged("%v", err)
	}
	if s.Schema != StateSchema && s.Schema != 1 {
		return nil, &StateError{File: p, Schema: s.Schema}
	}
	if _, err := githash.Parse(s.Commit); err != nil {
		return nil, damaged("commit: %v", err)
	}
	if !digest.IsSHA256Hex(s.RecipeSHA256) {
		return nil, damaged("recipe_sha256 %q is not a sha256", s.RecipeSHA256)
	}
	seen := map[string]bool{}
	for _, f := range s.Files {
		if _, err := patches.CleanPath(f.Path); err != nil {
			return nil, damaged("%v", err)
		}
		if seen[f.Path] {
			return nil, damaged("%s is listed twice", f.Path)
		}
		seen[f.Path] = true
		ok := map[string]bool{"create": f.Before == "" && f.After != "", "modify": f.Before != "" && f.After != "", "delete": f.Before != "" && f.After == ""}[f.Op]
		for _, h := range []string{f.Before, f.After} {
			ok = ok && (h == "" || digest.IsSHA256Hex(h))
		}
		if !ok {
			return nil, damaged("%s: op %q with before %q and after %q do not agree", f.Path, f.Op, f.Before, f.After)
		}
	}
	for _, ps := range s.Patches {
		if ps.Name == "" || !digest.IsSHA256Hex(ps.SHA256) {
			return nil, damaged("patch %q has sha256 %q", ps.Name, ps.SHA256)
		}
	}
	if (len(s.Patches) == 0) != (len(s.Files) == 0) {
		return nil, damaged("it lists %d patches but %d changed files", len(s.Patches), len(s.Files))
	}
	// Schema 1 (before the digest) is read with the other checks only.
	if want := s.digest(); s.Schema >= 2 && s.Digest != want {
		return nil, damaged("its digest is %q, but its contents hash to %q", s.Digest, want)
	}
	return &s, nil
}

// sh joins words into a command line a POSIX shell runs as printed.
func sh(words ...string) string { return shellq.Join(words) }

// digest returns the hex sha256 of the state's JSON with Digest empty.
func (s *State) digest() string {
	c := *s
	c.Digest = ""
	b, _ := json.Marshal(&c)
	return sum(b)
}

func writeState(gitDir string, s *State) error {
	s.Digest = s.digest()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return safefs.WriteFile(StatePath(gitDir), append(b, '\n'), 0o644)
}

// removeStrayTemps deletes temp files that a killed write of the state
// left in .git/arpatch/ (".state.json.arpatch-*", see safefs). Callers
// hold the lock, so no other arpatch is writing there.
func removeStrayTemps(gitDir string) {
	m, _ := filepath.Glob(filepath.Join(filepath.Dir(StatePath(gitDir)), ".state.json.arpatch-*"))
	for _, p := range m {
		_ = os.Remove(p) // a sweep: one that stays is swept next time
	}
}

func removeState(gitDir string) error {
	err := os.Remove(StatePath(gitDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func sum(b []byte) string {
	if b == nil {
		return ""
	}
	return digest.SHA256Hex(b)
}

// FileDrift is a recorded file whose bytes are no longer what apply wrote.
type FileDrift struct {
	Path string `json:"path"`
	Want string `json:"want_sha256"` // sha256 apply wrote ("" = deleted)
	Got  string `json:"got_sha256"`  // sha256 now ("" = missing)
	// Upstream is set when the file holds upstream's bytes again (its
	// sha256 before apply): restored by hand, or never written by an
	// interrupted apply. Nothing of the user's would be lost by revert.
	Upstream bool `json:"upstream"`
	// Mode is set when the bytes are apply's but the mode apply set was
	// changed since.
	Mode string `json:"mode,omitempty"`
}

func (d FileDrift) String() string {
	switch {
	case d.Mode != "":
		return d.Path + " (" + d.Mode + ")"
	case d.Upstream:
		return d.Path + " (upstream bytes again: not patched)"
	case d.Got == "":
		return d.Path + " (missing)"
	case d.Want == "":
		return d.Path + " (exists, but the series deleted it)"
	}
	return d.Path + " (changed since apply)"
}

// edits returns the drift that holds bytes neither apply nor upstream
// wrote: what revert would throw away. A patched file that is now missing
// holds nothing to lose; revert brings upstream's back.
func edits(ds []FileDrift) []FileDrift {
	var out []FileDrift
	for _, d := range ds {
		if !d.Upstream && d.Got != "" {
			out = append(out, d)
		}
	}
	return out
}

// drift compares each recorded file with the tree.
func (s *State) drift(root safefs.Root) ([]FileDrift, error) {
	var out []FileDrift
	for _, f := range s.Files {
		b, err := root.ReadFile(f.Path)
		got := sum(b)
		if errors.Is(err, fs.ErrNotExist) {
			got = ""
		} else if err != nil {
			return nil, err
		}
		if got != f.After {
			out = append(out, FileDrift{Path: f.Path, Want: f.After, Got: got, Upstream: got == f.Before})
			continue
		}
		if f.Mode != "" && err == nil {
			if m, err := root.Mode(f.Path); err == nil && (m&0o100 != 0) != (f.Mode == "100755") {
				out = append(out, FileDrift{Path: f.Path, Want: f.After, Got: got, Mode: fmt.Sprintf("mode %o since apply, which set %s", m, f.Mode)})
			}
		}
	}
	return out, nil
}
