package port

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches"
)

// Draft is the series a clean port yields, not yet written.
type Draft struct {
	Name   string
	Sealed bool
	// Files maps file names (series.toml and each patch) to their bytes.
	Files map[string][]byte
	order []string
}

var draftName = lazyre.New(`^[a-z0-9][a-z0-9.-]*$`)

// ErrConflicts is returned by Draft for a port with conflicts: nothing of
// it may be written.
var ErrConflicts = errors.New("the port has conflicts")

// Draft builds the series named name from a clean report of porting s:
// the same family, description, upstream, provides and requires, with
// tested_on = [the target]. With seal, series.toml records each patch's
// sha256; without, the entries are empty and `arpatch patches seal DIR`
// must run (after review) before apply loads it. It returns ErrConflicts
// (wrapped, with the count) when any patch conflicted, and an error for a
// name that is not a series name.
func (r *Report) Draft(s *patches.Series, name string, seal bool) (*Draft, error) {
	if r.Refused != "" {
		return nil, fmt.Errorf("%w: the ported series is refused by arpatch's effect rule at %s: %s; nothing is written", ErrConflicts, githash.Hash(r.To).Short(), r.Refused)
	}
	if !r.Clean {
		n := 0
		for _, p := range r.Patches {
			n += len(p.Conflicts)
		}
		return nil, fmt.Errorf("%w (%d); nothing is written", ErrConflicts, n)
	}
	if !draftName().MatchString(name) {
		return nil, nameError(name)
	}
	d := &Draft{Name: name, Sealed: seal, Files: map[string][]byte{}}
	out := *s
	out.Name = name
	out.TestedOn = []string{r.To}
	out.Patches = nil
	for i, e := range s.Patches {
		p := r.Patches[i]
		e.SHA256 = ""
		if seal {
			e.SHA256 = digest.SHA256Hex(p.Text)
		}
		out.Patches = append(out.Patches, e)
		d.Files[e.File] = p.Text
		d.order = append(d.order, e.File)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Ported by `arpatch patches port` from %s (tested on %s) to %s.\n", s.Name, r.From, r.To)
	if !seal {
		b.WriteString(patches.UnsealedLine)
	}
	enc := toml.NewEncoder(&b)
	enc.Indent = ""
	if err := enc.Encode(&out); err != nil {
		return nil, err
	}
	d.Files[patches.SeriesFile] = b.Bytes()
	d.order = append([]string{patches.SeriesFile}, d.order...)
	return d, nil
}

// Write writes the draft into dir, which must not exist or be empty, each
// file atomically; nothing a user had there is overwritten. It returns an
// error naming dir when it holds files.
func (d *Draft) Write(dir string) error {
	if err := CheckOut(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range d.order {
		if err := safefs.WriteFile(filepath.Join(dir, name), d.Files[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// CheckOut checks, writing nothing, that a draft may go into dir: it does
// not exist, or is an empty directory. The error names dir and the remedy.
func CheckOut(dir string) error {
	if name := filepath.Base(filepath.Clean(dir)); !draftName().MatchString(name) {
		return nameError(name)
	}
	ents, err := os.ReadDir(dir)
	switch {
	case err == nil && len(ents) > 0:
		return fmt.Errorf("--out %s already holds files; nothing was written. Pass a new directory (its name is the series name), or remove that one first", dir)
	case err == nil, errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return fmt.Errorf("--out %s: %w", dir, err)
}

// nameError says what a series name (the --out directory's) may be.
func nameError(name string) error {
	return fmt.Errorf("series name %q (the --out directory's name) must start with a lower case letter or digit and hold only lower case letters, digits, '.' and '-', e.g. pcie-2026-08; nothing was written", name)
}
