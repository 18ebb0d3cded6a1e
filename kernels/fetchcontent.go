package kernels

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
)

// Dep is one FetchContent_Declare of sgl-kernel's CMake files: a
// third-party source that CMake downloads at configure time unless
// FETCHCONTENT_SOURCE_DIR_<NAME> points at a local copy.
type Dep struct {
	Name string `json:"name"`          // "repo-cutlass"
	Repo string `json:"repo"`          // GIT_REPOSITORY or URL
	Tag  string `json:"tag,omitempty"` // GIT_TAG (a commit or a tag)
	File string `json:"file"`          // CMake file that declares it, relative to the tree
	// Dir and Commit are set when a --deps-dir copy was found.
	Dir    string `json:"dir,omitempty"`
	Commit string `json:"commit,omitempty"`
}

// Var is the CMake variable that points FetchContent at a local copy,
// e.g. FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS.
func (d Dep) Var() string { return "FETCHCONTENT_SOURCE_DIR_" + strings.ToUpper(d.Name) }

var (
	declareRe = regexp.MustCompile(`(?is)FetchContent_Declare\s*\(\s*([A-Za-z0-9_.+-]+)([^)]*)\)`)
	repoRe    = regexp.MustCompile(`(?i)\b(?:GIT_REPOSITORY|URL)\s+"?([^\s")]+)"?`)
	tagRe     = regexp.MustCompile(`(?i)\bGIT_TAG\s+"?([^\s")]+)"?`)
)

// ScanDeps lists the FetchContent_Declare names in CMakeLists.txt and
// cmake/*.cmake under dir (the tree's sgl-kernel/), sorted by name. A name
// declared twice (e.g. under different conditions) is listed once, from the
// first file.
func ScanDeps(dir string) ([]Dep, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel != "." && rel != "cmake" {
				return fs.SkipDir
			}
			return nil
		}
		if d.Name() == "CMakeLists.txt" || strings.HasSuffix(d.Name(), ".cmake") {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scanning %s for FetchContent_Declare: %w", dir, err)
	}
	sort.Strings(files)
	seen := map[string]bool{}
	var deps []Dep
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		for _, m := range declareRe.FindAllStringSubmatch(stripCMakeComments(string(b)), -1) {
			if seen[m[1]] {
				continue
			}
			seen[m[1]] = true
			d := Dep{Name: m[1], File: path.Join("sgl-kernel", filepath.ToSlash(f))}
			if r := repoRe.FindStringSubmatch(m[2]); r != nil {
				d.Repo = r[1]
			}
			if t := tagRe.FindStringSubmatch(m[2]); t != nil {
				d.Tag = t[1]
			}
			deps = append(deps, d)
		}
	}
	sort.Slice(deps, func(i, j int) bool { return deps[i].Name < deps[j].Name })
	return deps, nil
}

func stripCMakeComments(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if j := strings.Index(l, "#"); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}

// MissingDepsError lists dependencies an offline build would download.
type MissingDepsError struct {
	DepsDir string
	Missing []Dep
}

func (e *MissingDepsError) Error() string {
	var b strings.Builder
	where := "no --deps-dir was given"
	if e.DepsDir != "" {
		where = "not found in --deps-dir " + e.DepsDir
	}
	fmt.Fprintf(&b, "--offline: %d dependencies would be downloaded at configure time (%s):", len(e.Missing), where)
	for _, d := range e.Missing {
		fmt.Fprintf(&b, "\n  %-24s %s @ %s  (%s)", d.Name, d.Repo, d.Tag, d.File)
	}
	b.WriteString("\nclone each at its pinned commit into the deps dir, named as above (or by the repository's base name), then pass --deps-dir")
	return b.String()
}

// MapDeps finds a local copy of each dep in depsDir, as depsDir/<name>,
// depsDir/<repo base name> or depsDir/<name without "repo-">, and records
// its git HEAD. A copy whose HEAD is not the pinned commit or tag is an
// error naming both. With offline set, any dep without a copy is a
// *MissingDepsError listing every one with the commit it pins.
func MapDeps(deps []Dep, depsDir string, offline bool) ([]Dep, error) {
	out := make([]Dep, len(deps))
	var missing []Dep
	for i, d := range deps {
		out[i] = d
		if depsDir != "" {
			for _, cand := range candidates(d) {
				p := filepath.Join(depsDir, cand)
				if fi, err := os.Stat(p); err == nil && fi.IsDir() {
					abs, _ := filepath.Abs(p)
					out[i].Dir = abs
					break
				}
			}
		}
		if out[i].Dir == "" {
			missing = append(missing, d)
			continue
		}
		if repo, err := gitsrc.Open(out[i].Dir); err == nil {
			head, err := repo.Head()
			if err != nil {
				return nil, fmt.Errorf("dependency %s at %s: %w", d.Name, out[i].Dir, err)
			}
			out[i].Commit = head
			if d.Tag != "" {
				want, err := repo.Resolve(d.Tag)
				if err != nil {
					return nil, fmt.Errorf("dependency %s at %s: %s pins %s, which that checkout does not have; fetch it there", d.Name, out[i].Dir, d.File, d.Tag)
				}
				if want != head {
					return nil, fmt.Errorf("dependency %s at %s is at %s, but %s pins %s (%s); run `git -C %s checkout %s`",
						d.Name, out[i].Dir, head[:12], d.File, d.Tag, want[:12], out[i].Dir, d.Tag)
				}
			}
		}
	}
	if offline && len(missing) > 0 {
		return nil, &MissingDepsError{DepsDir: depsDir, Missing: missing}
	}
	return out, nil
}

func candidates(d Dep) []string {
	c := []string{d.Name}
	if d.Repo != "" {
		c = append(c, strings.TrimSuffix(path.Base(d.Repo), ".git"))
	}
	c = append(c, strings.TrimPrefix(d.Name, "repo-"))
	return c
}
