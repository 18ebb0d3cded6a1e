package patches

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/tomlx"
)

// SeriesFile is the name of the file that describes a series.
const SeriesFile = "series.toml"

// Series is an ordered, versioned set of patches for one shape of upstream
// code, described by a series.toml in its own directory.
type Series struct {
	// Name is the series' directory name, e.g. "pcie-2026-04".
	Name string `toml:"name"`
	// Family groups series that do the same job for different upstream
	// eras; a recipe's `series` names a family or one series.
	Family      string `toml:"family"`
	Description string `toml:"description"`
	// Upstream is the repository the series is written against.
	Upstream string `toml:"upstream"`
	// TestedOn lists the 40-hex upstream commits the series was tested on.
	// A checkout at one of them picks this series without a trial apply.
	TestedOn []string `toml:"tested_on"`
	// Requires lists pairs [A, B]: when patch A is in the series, patch B
	// must be too, and come before it. A and B are patch file names or
	// `provides` tags.
	Requires [][]string   `toml:"requires"`
	Patches  []PatchEntry `toml:"patch"`

	// Dir says where the series came from, for messages: "embedded:pcie-2026-04" or a path.
	Dir  string `toml:"-"`
	fsys fs.FS
	root string // the series' directory inside fsys
}

// PatchEntry is one [[patch]] table of series.toml.
type PatchEntry struct {
	File     string   `toml:"file"`
	SHA256   string   `toml:"sha256"`
	Provides []string `toml:"provides"`
}

var (
	patchName  = regexp.MustCompile(`^[0-9]{4}-[a-z0-9][a-z0-9.-]*\.patch$`)
	seriesName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)
)

// LoadSeries reads dir/series.toml from fsys and validates it: known keys
// only, a 40-hex commit list, patch names of the form NNNN-name.patch, a
// 64-hex sha256 for each, and requires pairs that name patches or tags of
// this series. label says where fsys is, for messages. Errors name the file,
// key and line.
func LoadSeries(fsys fs.FS, dir, label string) (*Series, error) {
	file := path.Join(dir, SeriesFile)
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, fmt.Errorf("series %s: %w", label, err)
	}
	return loadSeries(fsys, dir, label, data, false)
}

// loadSeries decodes and validates series.toml's data by LoadSeries'
// rules; sealing leaves out the two that Seal is there to mend or
// words itself: each patch's sha256, and .patch files it does not list.
func loadSeries(fsys fs.FS, dir, label string, data []byte, sealing bool) (*Series, error) {
	where := label + "/" + SeriesFile
	var s Series
	md, err := toml.Decode(string(data), &s)
	if err != nil {
		return nil, tomlx.DecodeError(where, err)
	}
	if err := tomlx.Strict(where, data, md); err != nil {
		return nil, err
	}
	s.Dir = label
	s.fsys = fsys
	s.root = dir
	if s.Name == "" {
		s.Name = path.Base(dir)
	}
	fail := func(key, format string, args ...any) error {
		if line := tomlx.Line(data, key); line > 0 {
			return fmt.Errorf("%s:%d: %s: %s", where, line, key, fmt.Sprintf(format, args...))
		}
		// The key is not in the file: there is no line to point at.
		return fmt.Errorf("%s: %s: %s", where, key, fmt.Sprintf(format, args...))
	}
	if !seriesName.MatchString(s.Name) {
		return nil, fail("name", "%q must start with a lower case letter or digit and hold only lower case letters, digits, '.' and '-'", s.Name)
	}
	if s.Name != path.Base(dir) {
		return nil, fail("name", "%q differs from the directory name %q", s.Name, path.Base(dir))
	}
	if s.Family == "" {
		return nil, fail("family", "missing; name the job the series does, e.g. \"pcie\"")
	}
	for _, c := range s.TestedOn {
		if _, err := githash.Parse(c); err != nil {
			return nil, fail("tested_on", "%v", err)
		}
	}
	if len(s.Patches) == 0 {
		return nil, fail("patch", "the series lists no [[patch]]")
	}
	names := map[string]bool{}
	tags := map[string]bool{}
	for _, p := range s.Patches {
		if !patchName.MatchString(p.File) {
			return nil, fail("patch.file", "%q: patch files are named NNNN-name.patch", p.File)
		}
		if names[p.File] {
			return nil, fail("patch.file", "%q is listed twice", p.File)
		}
		names[p.File] = true
		if !sealing && !digest.IsSHA256Hex(p.SHA256) {
			return nil, fail("patch.sha256", "%s: %q is not a 64-hex sha256; run `%s`", p.File, p.SHA256, shellq.Join([]string{"arpatch", "patches", "seal", label}))
		}
		for _, t := range p.Provides {
			tags[t] = true
		}
	}
	if ents, err := fs.ReadDir(fsys, dir); err == nil && !sealing {
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".patch") && !names[e.Name()] {
				return nil, fmt.Errorf("%s: %s is in the series directory but not listed in %s; list it as a [[patch]] (and seal) or remove it", label, e.Name(), SeriesFile)
			}
		}
	}
	for _, pair := range s.Requires {
		if len(pair) != 2 {
			return nil, fail("requires", "%q: each entry is a pair [\"A\", \"B\"]", pair)
		}
		for _, x := range pair {
			if !names[x] && !tags[x] {
				return nil, fail("requires", "%q names no patch file or provides tag of this series", x)
			}
		}
	}
	if cycle := requiresCycle(&s); cycle != nil {
		return nil, fail("requires", "cycle: %s; a patch cannot need, directly or through others, a patch that needs it, so no order satisfies them. Remove one of these pairs", strings.Join(cycle, " requires "))
	}
	return &s, nil
}

// requiresCycle returns the patch names of a cycle in the requires pairs
// (a pair [A, B] is an edge from every patch that is or provides A to
// every patch that is or provides B), first name repeated at the end, or
// nil.
func requiresCycle(s *Series) []string {
	match := func(x string) []string {
		var out []string
		for _, p := range s.Patches {
			if p.File == x || slices.Contains(p.Provides, x) {
				out = append(out, p.File)
			}
		}
		return out
	}
	next := map[string][]string{}
	for _, pair := range s.Requires {
		for _, a := range match(pair[0]) {
			next[a] = append(next[a], match(pair[1])...)
		}
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		for _, m := range next[n] {
			switch state[m] {
			case onPath:
				i := slices.Index(path, m)
				return append(append([]string(nil), path[i:]...), m)
			case unseen:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, p := range s.Patches {
		if state[p.File] == unseen {
			if c := visit(p.File); c != nil {
				return c
			}
		}
	}
	return nil
}

// Family names the job; Series.String gives "name (family, N patches)".
func (s *Series) String() string {
	return fmt.Sprintf("%s (%s, %d patches)", s.Name, s.Family, len(s.Patches))
}

// TamperError is a patch file whose bytes differ from the sha256 that its
// series.toml records.
type TamperError struct {
	Series, Patch, Want, Got string
}

func (e *TamperError) Error() string {
	return fmt.Sprintf("patch %s/%s: sha256 is %s but series.toml records %s; the patch was changed after it was sealed. "+
		"Restore the original file, or if you changed it on purpose, run `%s`",
		e.Series, e.Patch, e.Got, e.Want, shellq.Join([]string{"arpatch", "patches", "seal", e.Series}))
}

// RequiresError is a selection of patches that leaves out a patch another
// one needs, such as the Python gate bypass without the C++ dispatch branch.
type RequiresError struct {
	Series, Patch, Needs, Why string
}

func (e *RequiresError) Error() string {
	return fmt.Sprintf("series %s: %s requires %s: %s", e.Series, e.Patch, e.Needs, e.Why)
}

// Load reads, verifies and parses the series' patches, leaving out those
// named in skip. It checks every sha256 before parsing anything, then each
// DEP-3 header, then the requires pairs and arpatch's own safety rule (see
// CheckRequires). It returns a *TamperError, a *RequiresError or a parse
// error naming the patch.
func (s *Series) Load(skip []string) ([]*Patch, error) {
	for _, k := range skip {
		if !slices.ContainsFunc(s.Patches, func(p PatchEntry) bool { return p.File == k }) {
			return nil, fmt.Errorf("series %s: skip names %q, which is not in the series (it has %s)", s.Name, k, strings.Join(s.Files(), ", "))
		}
	}
	raw := map[string][]byte{}
	for _, e := range s.Patches {
		data, err := fs.ReadFile(s.fsys, path.Join(s.root, e.File))
		if err != nil {
			return nil, fmt.Errorf("series %s: %w", s.Name, err)
		}
		if got := digest.SHA256Hex(data); got != e.SHA256 {
			return nil, &TamperError{Series: s.Dir, Patch: e.File, Want: e.SHA256, Got: got}
		}
		raw[e.File] = data
	}
	var out []*Patch
	for _, e := range s.Patches {
		if slices.Contains(skip, e.File) {
			continue
		}
		d, err := ParseDiff(e.File, raw[e.File])
		if err != nil {
			return nil, err
		}
		if m := d.Header.Missing(); len(m) > 0 {
			return nil, fmt.Errorf("patch %s/%s: the DEP-3 header lacks %s", s.Dir, e.File, strings.Join(m, ", "))
		}
		out = append(out, &Patch{Name: e.File, SHA256: e.SHA256, Provides: e.Provides, Diff: d})
	}
	if err := CheckRequires(s.Name, out, s.Requires); err != nil {
		return nil, err
	}
	return out, nil
}

// Files lists the patch file names in order.
func (s *Series) Files() []string {
	var f []string
	for _, p := range s.Patches {
		f = append(f, p.File)
	}
	return f
}

// Seal recomputes every patch's sha256 in dir/series.toml on disk, keeping
// the rest of the file as written. It is the maintainer's step after editing
// a patch. It refuses what LoadSeries refuses (a patch name apply would
// not take, an unknown key, ...), but for the hashes it is there to write,
// and a patch that does not parse. It returns the names whose hash
// changed. It reads each patch once and writes series.toml in one pass:
// linear in the series' size. dir is the series directory's path in
// fsys, not "." : its base name is the one series.toml's name must match.
func Seal(fsys fs.FS, dir string, write func(name string, data []byte) error) ([]string, error) {
	data, err := fs.ReadFile(fsys, path.Join(dir, SeriesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s here: a series directory holds %s and the .patch files it lists (see patches/sglang/pcie-2026-04)", SeriesFile, SeriesFile)
	}
	if err != nil {
		return nil, err
	}
	var loose Series
	if _, err := toml.Decode(string(data), &loose); err != nil {
		return nil, tomlx.DecodeError(path.Join(dir, SeriesFile), err)
	}
	listed := map[string]bool{}
	for _, p := range loose.Patches {
		listed[p.File] = true
	}
	if ents, err := fs.ReadDir(fsys, dir); err == nil {
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".patch") && !listed[e.Name()] {
				return nil, fmt.Errorf("%s is here but not listed in %s; add a [[patch]] entry for it (file = %q, sha256 = \"\") or remove it, then seal again; nothing was written", e.Name(), SeriesFile, e.Name())
			}
		}
	}
	s, err := loadSeries(fsys, dir, dir, data, true)
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	var changed []string
	for _, p := range s.Patches {
		b, err := fs.ReadFile(fsys, path.Join(dir, p.File))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s lists %s, which is not here; add the file or remove its [[patch]] entry; nothing was written", SeriesFile, p.File)
		}
		if err != nil {
			return nil, fmt.Errorf("seal %s: %w", dir, err)
		}
		// Seal only what apply can read: a malformed patch is refused here.
		d, err := ParseDiff(p.File, b)
		if err != nil {
			return nil, fmt.Errorf("seal %s: %w", dir, err)
		}
		if m := d.Header.Missing(); len(m) > 0 {
			return nil, fmt.Errorf("seal %s: %s: the DEP-3 header lacks %s", dir, p.File, strings.Join(m, ", "))
		}
		if sum := digest.SHA256Hex(b); sum != p.SHA256 {
			sums[p.File] = sum
			changed = append(changed, p.File)
		}
	}
	// A draft's "unsealed" line says what sealing does; once sealed it
	// would be untrue, so it goes with the hashes.
	unsealed := bytes.Contains(data, []byte(UnsealedLine))
	if len(changed) == 0 && !unsealed {
		return nil, nil
	}
	out, err := rewriteSHAs(data, sums)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", dir, err)
	}
	out = bytes.Replace(out, []byte(UnsealedLine), nil, 1)
	return changed, write(path.Join(dir, SeriesFile), out)
}

// UnsealedLine is the line `arpatch patches port` writes at the top of a
// draft's series.toml whose hashes are left empty for review; Seal removes
// it when it writes the hashes.
const UnsealedLine = "# Unsealed: review every patch, then run `arpatch patches seal DIR`.\n"

var (
	patchTable = regexp.MustCompile(`(?m)^[ \t]*\[\[[ \t]*patch[ \t]*\]\]`)
	fileLine   = regexp.MustCompile(`(?m)^[ \t]*file[ \t]*=[ \t]*(?:"([^"\n]*)"|'([^'\n]*)')[^\n]*(?:\n|$)`)
	shaLine    = regexp.MustCompile(`(?m)^([ \t]*sha256[ \t]*=[ \t]*)(?:"[^"\n]*"|'[^'\n]*')`)
)

// rewriteSHAs returns data with the sha256 of each [[patch]] table whose
// file is a key of sums set to its value (a sha256 line added after the
// file line where the table has none), in one pass over data. It is an
// error for a name of sums to have no table.
func rewriteSHAs(data []byte, sums map[string]string) ([]byte, error) {
	starts := patchTable.FindAllIndex(data, -1)
	out := make([]byte, 0, len(data)+len(sums)*80)
	done := map[string]bool{}
	prev := 0
	for k, st := range starts {
		end := len(data)
		if k+1 < len(starts) {
			end = starts[k+1][0]
		}
		seg := data[st[0]:end]
		out = append(out, data[prev:st[0]]...)
		prev = end
		m := fileLine.FindSubmatchIndex(seg)
		if m == nil {
			out = append(out, seg...)
			continue
		}
		var name string
		if m[2] >= 0 {
			name = string(seg[m[2]:m[3]])
		} else {
			name = string(seg[m[4]:m[5]])
		}
		sum, ok := sums[name]
		if !ok || done[name] {
			out = append(out, seg...)
			continue
		}
		done[name] = true
		if loc := shaLine.FindSubmatchIndex(seg); loc != nil {
			out = append(append(append(append(out, seg[:loc[3]]...), '"'), sum...), '"')
			out = append(out, seg[loc[1]:]...)
			continue
		}
		at := m[1] // after the file line
		out = append(out, seg[:at]...)
		if at > 0 && seg[at-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(append(append(out, `sha256 = "`...), sum...), "\"\n"...)
		out = append(out, seg[at:]...)
	}
	out = append(out, data[prev:]...)
	for name := range sums {
		if !done[name] {
			return nil, fmt.Errorf("%s names %s in no [[patch]] table's file line", SeriesFile, name)
		}
	}
	return out, nil
}

// sortSeries orders series by family then name.
func sortSeries(ss []*Series) {
	sort.Slice(ss, func(i, j int) bool {
		if ss[i].Family != ss[j].Family {
			return ss[i].Family < ss[j].Family
		}
		return ss[i].Name < ss[j].Name
	})
}
