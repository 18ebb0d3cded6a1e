package patches

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/arpatch/arpatch/internal/shellq"
)

// embedded holds the series shipped with arpatch, under sglang/<series>/.
//
//go:embed sglang
var embedded embed.FS

// Catalog is the set of series a run can use: those shipped with arpatch,
// or those in a --patches-dir.
type Catalog struct {
	Series []*Series
	// Dir is the --patches-dir the series came from; "" for the embedded
	// ones. Remedies that name a series pass it on.
	Dir string
	// Skipped lists the series directories of a --patches-dir that did
	// not load (an unsealed draft, a bad series.toml): passed over so that
	// they do not block the others, never applied, and refused with
	// their error where a command names them.
	Skipped []Skipped
}

// Skipped is a series directory that did not load.
type Skipped struct {
	Name   string // the directory's name (a series is named after it)
	Family string // from its series.toml, when that reads
	Dir    string
	Err    error
}

// skipped returns the passed-over series of that name, or nil.
func (c *Catalog) skipped(name string) *Skipped {
	for i := range c.Skipped {
		if c.Skipped[i].Name == name {
			return &c.Skipped[i]
		}
	}
	return nil
}

// PassedOver says, one line each, which series were passed over and why.
func (c *Catalog) PassedOver() []string {
	var out []string
	for _, k := range c.Skipped {
		out = append(out, fmt.Sprintf("passed over series %s (%s), which does not load: %v", k.Name, k.Dir, k.Err))
	}
	return out
}

// With returns a catalog holding c's series and extra's beside them; a
// series of extra with the name of one of c's replaces it. Dir is extra's.
// The nightly's [arms] patches_dir adds to the embedded series this way,
// so a new era's series does not take away the one the pinned commit
// needs.
func (c *Catalog) With(extra *Catalog) *Catalog {
	out := &Catalog{Dir: extra.Dir}
	mine := map[string]bool{}
	for _, s := range extra.Series {
		mine[s.Name] = true
	}
	for _, s := range c.Series {
		if !mine[s.Name] {
			out.Series = append(out.Series, s)
		}
	}
	out.Series = append(out.Series, extra.Series...)
	out.Skipped = append(append(out.Skipped, c.Skipped...), extra.Skipped...)
	return out
}

// CheckCommand returns the `arpatch patches check` command line that
// shows how this catalog's series fit commit in repo: the remedy printed
// when no series fits. It names the full 40-hex commit (an abbreviation
// is refused) and --patches-dir when the catalog came from one, each word
// quoted for a POSIX shell, so it runs as printed.
func (c *Catalog) CheckCommand(repo, commit string) string {
	words := []string{"arpatch", "patches", "check", "--repo", repo, "--commit", commit}
	if c != nil && c.Dir != "" {
		words = append(words, "--patches-dir", c.Dir)
	}
	return shellq.Join(words)
}

// Embedded returns the series shipped in the arpatch binary. An error here
// is a bug in the shipped series.
func Embedded() (*Catalog, error) {
	return loadCatalog(embedded, "sglang", "patches/sglang/", false)
}

// LoadDir returns the series in dir, one per subdirectory holding a
// series.toml (a tree shaped like arpatch's patches/sglang/). A dir that
// is missing or a file is an error starting "DIR: " or "DIR is a file",
// naming no flag: the caller names the flag (--patches-dir) or key
// (arms.patches_dir) that gave it.
func LoadDir(dir string) (*Catalog, error) {
	fi, err := os.Stat(dir)
	var pe *os.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("%s: %w", dir, pe.Err)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is a file; pass the directory that holds one directory per series", dir)
	}
	c, err := loadCatalog(os.DirFS(dir), ".", dir+"/", true)
	if err != nil {
		return nil, err
	}
	c.Dir = dir
	return c, nil
}

// loadCatalog loads every series directory under root. With passOver, a
// series that does not load is listed in Skipped instead of failing the
// catalog, unless none loads.
func loadCatalog(fsys fs.FS, root, label string, passOver bool) (*Catalog, error) {
	ents, err := fs.ReadDir(fsys, root)
	if err != nil {
		return nil, err
	}
	c := &Catalog{}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := path.Join(root, e.Name())
		if _, err := fs.Stat(fsys, path.Join(dir, SeriesFile)); err != nil {
			continue
		}
		s, err := LoadSeries(fsys, dir, label+e.Name())
		if err != nil {
			if !passOver {
				return nil, err
			}
			k := Skipped{Name: e.Name(), Dir: label + e.Name(), Err: err}
			var head struct{ Family string }
			if data, rerr := fs.ReadFile(fsys, path.Join(dir, SeriesFile)); rerr == nil {
				if _, derr := toml.Decode(string(data), &head); derr == nil {
					k.Family = head.Family
				}
			}
			c.Skipped = append(c.Skipped, k)
			continue
		}
		c.Series = append(c.Series, s)
	}
	if len(c.Series) == 0 && len(c.Skipped) > 0 {
		return nil, c.Skipped[0].Err
	}
	if len(c.Series) == 0 {
		return nil, fmt.Errorf("%s: no series found (each series is a directory with a %s)", strings.TrimSuffix(label, "/"), SeriesFile)
	}
	sortSeries(c.Series)
	return c, nil
}

// Get returns the series with this name.
func (c *Catalog) Get(name string) (*Series, error) {
	for _, s := range c.Series {
		if s.Name == name {
			return s, nil
		}
	}
	if k := c.skipped(name); k != nil {
		return nil, k.Err
	}
	return nil, fmt.Errorf("no series named %q; known series: %s", name, c.names())
}

// Members returns the series whose family or name is want.
func (c *Catalog) Members(want string) []*Series {
	var out []*Series
	for _, s := range c.Series {
		if s.Family == want || s.Name == want {
			out = append(out, s)
		}
	}
	return out
}

func (c *Catalog) names() string {
	var n []string
	for _, s := range c.Series {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}
