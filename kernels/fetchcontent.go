package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/shellq"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/lazyre"
)

// Dep is one FetchContent_Declare of sgl-kernel's CMake files: a
// third-party source that CMake downloads at configure time unless
// FETCHCONTENT_SOURCE_DIR_<NAME> points at a local copy. Upstream declares
// them in one of two forms:
//   - GIT_REPOSITORY + GIT_TAG. Upstream:
//     sgl-kernel/CMakeLists.txt@84118acf50b3 (FetchContent_Declare).
//   - URL https://${GITHUB_ARTIFACTORY}/<org>/<repo>/archive/<rev>.tar.gz +
//     URL_HASH SHA256=<hex>, with GITHUB_ARTIFACTORY a cache variable
//     defaulting to github.com, here and in cmake/flashmla.cmake beside it.
//     Upstream: sgl-kernel/CMakeLists.txt@8905cbd42f4a (FetchContent_Declare,
//     set(GITHUB_ARTIFACTORY)). Upstream:
//     python/sglang/kernels/aot/CMakeLists.txt@0bda0b168ad5 (the same).
type Dep struct {
	Name    string `json:"name"`               // "repo-cutlass"
	Repo    string `json:"repo"`               // GIT_REPOSITORY or URL, as the CMake file spells it
	Tag     string `json:"tag,omitempty"`      // GIT_TAG (a commit or a tag)
	URLHash string `json:"url_hash,omitempty"` // URL_HASH, e.g. "SHA256=09237099..."
	File    string `json:"file"`               // CMake file that declares it, relative to the tree
	// URL is Repo with the ${VAR}s the CMake files set() expanded
	// (GITHUB_ARTIFACTORY: github.com): where to download it by hand.
	URL string `json:"url,omitempty"`
	// Dir and Commit are set when a --deps-dir copy was found: Commit is
	// the copy's git HEAD, or "sha256:<hex>" of its files when the copy
	// is not a git checkout (an unpacked archive), or
	// "archive-sha256:<hex>" of the archive Archive, which the build
	// unpacks into Dir (under its temp directory, TmpMarker).
	Dir     string `json:"dir,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Archive string `json:"archive,omitempty"`
}

// Pin is the revision upstream pins: GIT_TAG, or for an archive URL of
// GitHub's form ".../archive/<rev>.tar.gz" that <rev>; "" when neither.
func (d Dep) Pin() string {
	if d.Tag != "" {
		return d.Tag
	}
	if i := strings.Index(d.Repo, "/archive/"); i >= 0 {
		rev := d.Repo[i+len("/archive/"):]
		for _, ext := range []string{".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tar.xz"} {
			if strings.HasSuffix(rev, ext) {
				rev = strings.TrimSuffix(rev, ext)
				rev = strings.TrimPrefix(rev, "refs/tags/")
				if rev != "" && !strings.Contains(rev, "/") {
					return rev
				}
			}
		}
	}
	return ""
}

// Var is the CMake variable that points FetchContent at a local copy,
// e.g. FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS.
func (d Dep) Var() string { return "FETCHCONTENT_SOURCE_DIR_" + strings.ToUpper(d.Name) }

var (
	declareRe = lazyre.New(`(?is)FetchContent_Declare\s*\(\s*([A-Za-z0-9_.+-]+)([^)]*)\)`)
	setRe     = lazyre.New(`(?i)\bset\s*\(\s*([A-Za-z0-9_]+)\s+"([^"$]*)"`)
	varRe     = lazyre.New(`\$\{([A-Za-z0-9_]+)\}`)
	repoRe    = lazyre.New(`(?i)\b(?:GIT_REPOSITORY|URL)\s+"?([^\s")]+)"?`)
	tagRe     = lazyre.New(`(?i)\bGIT_TAG\s+"?([^\s")]+)"?`)
	hashRe    = lazyre.New(`(?i)\bURL_HASH\s+"?([^\s")]+)"?`)
)

// ScanDeps lists the FetchContent_Declare names in CMakeLists.txt and
// cmake/*.cmake under dir, the sgl-kernel project's directory (rel is
// that directory relative to the tree, for Dep.File), sorted by name. A
// name declared twice (e.g. under different conditions) is listed once,
// from the first file. ${VAR} in a URL is expanded into Dep.URL from the
// first set(VAR "literal" ...) of those files.
func ScanDeps(dir, rel string) ([]Dep, error) {
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
	vars := map[string]string{}
	var deps []Dep
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		text := stripCMakeComments(string(b))
		for _, m := range setRe().FindAllStringSubmatch(text, -1) {
			if _, ok := vars[m[1]]; !ok {
				vars[m[1]] = m[2]
			}
		}
		for _, m := range declareRe().FindAllStringSubmatch(text, -1) {
			if seen[m[1]] {
				continue
			}
			seen[m[1]] = true
			d := Dep{Name: m[1], File: path.Join(rel, filepath.ToSlash(f))}
			if r := repoRe().FindStringSubmatch(m[2]); r != nil {
				d.Repo = r[1]
			}
			if t := tagRe().FindStringSubmatch(m[2]); t != nil {
				d.Tag = t[1]
			}
			if h := hashRe().FindStringSubmatch(m[2]); h != nil {
				d.URLHash = h[1]
			}
			deps = append(deps, d)
		}
	}
	for i, d := range deps {
		deps[i].URL = varRe().ReplaceAllStringFunc(d.Repo, func(v string) string {
			if val, ok := vars[v[2:len(v)-1]]; ok && val != "" {
				return val
			}
			return v
		})
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
	where, dir := "no --deps-dir was given", "deps"
	if e.DepsDir != "" {
		where, dir = "not found in --deps-dir "+e.DepsDir, e.DepsDir
		if fi, err := os.Stat(e.DepsDir); err != nil || !fi.IsDir() {
			where = "--deps-dir " + e.DepsDir + " does not exist yet"
		}
	}
	fmt.Fprintf(&b, "--offline: %d dependencies would be downloaded at configure time (%s):", len(e.Missing), where)
	for _, d := range e.Missing {
		fmt.Fprintf(&b, "\n  %-24s %s @ %s  (%s)", d.Name, d.URL, pinOrNone(d.Pin()), d.File)
	}
	fmt.Fprintf(&b, "\nfetch each into the deps dir (on a machine with network, then copy the dir here), as an archive where upstream pins one by URL_HASH (arpatch checks its SHA256) or as a clone at the pin:\n  mkdir -p %s", shellq.Quote(dir))
	for _, d := range e.Missing {
		b.WriteString("\n  " + fetchCommand(d, dir))
	}
	fmt.Fprintf(&b, "\nthen run the build again with --deps-dir %s", shellq.Quote(dir))
	return b.String()
}

// fetchCommand is the shell command that puts d into dir under the name
// MapDeps looks for first.
// Paths are quoted for the shell where they need it.
func fetchCommand(d Dep, dir string) string {
	q := shellq.Quote
	if isArchiveURL(d.URL) {
		return fmt.Sprintf("curl -fL -o %s %s", q(filepath.Join(dir, d.Name+".tar.gz")), q(d.URL))
	}
	to := q(filepath.Join(dir, d.Name))
	if d.Tag == "" {
		return fmt.Sprintf("git clone %s %s", q(d.URL), to)
	}
	return fmt.Sprintf("git clone %s %s && git -C %s checkout %s", q(d.URL), to, to, q(d.Tag))
}

func isArchiveURL(u string) bool {
	return strings.HasSuffix(u, ".tar.gz") || strings.HasSuffix(u, ".tgz")
}

// CheckDepsDir returns an error naming --deps-dir dir, with the command
// that creates it, unless dir is a directory; `arpatch build` calls it on
// its flag before anything runs, MapDeps on the directory a build uses.
func CheckDepsDir(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--deps-dir %s: not a directory; create it (mkdir -p %s) and fetch each dependency into it: the build with --offline lists them, each with the command that fetches it", dir, shellq.Quote(dir))
	}
	return nil
}

// MapDeps finds a local copy of each dep in depsDir and records what the
// build will compile from it, so that the cache key covers it. A copy is
// looked up as a directory depsDir/<name>, depsDir/<name without
// "repo-"> or depsDir/<repo base name> (the last only when one dep alone
// has that base name: upstream pins two cutlass commits), then, for a dep
// pinned by an archive URL, as an archive: those names plus ".tar.gz", the
// URL's own file name (<rev>.tar.gz, as curl -O saves it) or GitHub's
// <repo>-<rev>.tar.gz.
//
//   - a git checkout must be at the pinned revision (Dep.Pin) and have no
//     changes to tracked files; its HEAD is recorded. A checkout at
//     another commit, without the pinned one, or with local edits is an
//     error naming the dep, the directory, the CMake file and the remedy.
//   - any other directory (an unpacked archive) is hashed file by file,
//     and "sha256:<hex>" is recorded; its match with the pin cannot be
//     checked, which the plan says.
//   - an archive must have the SHA256 of the dep's URL_HASH (an archive
//     for a dep without one is taken, its pin unchecked); an archive that
//     differs is an error naming both hashes and the download command.
//     "archive-sha256:<hex>" is recorded, and Dir is where Build unpacks
//     it: TmpMarker/deps/<name>.
//
// A depsDir that does not exist is an error (CheckDepsDir's), but with
// offline set, where it holds no copy: then any dep without a copy is a
// *MissingDepsError listing every one with the command that fetches it,
// the mkdir of depsDir first (one step for a deps dir not made yet).
func MapDeps(deps []Dep, depsDir string, offline bool) ([]Dep, error) {
	if depsDir != "" && !offline {
		if err := CheckDepsDir(depsDir); err != nil {
			return nil, err
		}
	}
	out := make([]Dep, len(deps))
	var missing []Dep
	shared := map[string]int{}
	for _, d := range deps {
		shared[repoBase(d)]++
	}
	for i, d := range deps {
		out[i] = d
		if depsDir != "" {
			for _, cand := range candidates(d, shared) {
				p := filepath.Join(depsDir, cand)
				if fi, err := os.Stat(p); err == nil && fi.IsDir() {
					abs, _ := filepath.Abs(p)
					out[i].Dir = abs
					break
				}
			}
		}
		if out[i].Dir == "" && depsDir != "" {
			a, err := findArchive(d, depsDir, shared)
			if err != nil {
				return nil, err
			}
			if a != "" {
				sum, _, err := fileSHA256(a)
				if err != nil {
					return nil, fmt.Errorf("dependency %s: %w", d.Name, err)
				}
				if err := checkURLHash(d, a, sum); err != nil {
					return nil, err
				}
				out[i].Archive, out[i].Dir, out[i].Commit = a, TmpMarker+"/deps/"+d.Name, "archive-sha256:"+sum
				continue
			}
		}
		if out[i].Dir == "" {
			missing = append(missing, d)
			continue
		}
		commit, err := depRevision(out[i])
		if err != nil {
			return nil, err
		}
		out[i].Commit = commit
	}
	if offline && len(missing) > 0 {
		return nil, &MissingDepsError{DepsDir: depsDir, Missing: missing}
	}
	return out, nil
}

// findArchive returns the absolute path of d's archive in depsDir, or ""
// when there is none (or d is not pinned by an archive URL).
func findArchive(d Dep, depsDir string, shared map[string]int) (string, error) {
	if !isArchiveURL(d.URL) {
		return "", nil
	}
	var names []string
	for _, c := range candidates(d, shared) {
		names = append(names, c+".tar.gz")
	}
	names = append(names, path.Base(d.URL))
	if b, rev := repoBase(d), d.Pin(); b != "" && rev != "" && shared[b] == 1 {
		names = append(names, b+"-"+rev+".tar.gz", b+"-"+strings.TrimPrefix(rev, "v")+".tar.gz")
	}
	for _, n := range names {
		p := filepath.Join(depsDir, n)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return filepath.Abs(p)
		}
	}
	return "", nil
}

// checkURLHash holds archive (of sha256 sum) to d's URL_HASH.
func checkURLHash(d Dep, archive, sum string) error {
	if d.URLHash == "" {
		return nil
	}
	algo, want, ok := strings.Cut(d.URLHash, "=")
	if !ok || !strings.EqualFold(algo, "SHA256") {
		return fmt.Errorf("dependency %s: %s pins URL_HASH %s, which arpatch cannot check; unpack %s into %s instead", d.Name, d.File, d.URLHash, archive, strings.TrimSuffix(archive, ".tar.gz"))
	}
	if !strings.EqualFold(want, sum) {
		return fmt.Errorf("dependency %s: %s has sha256 %s, but %s pins URL_HASH SHA256=%s: it is not the archive upstream pins (a truncated download, or another revision). Fetch it again: rm %s && %s",
			d.Name, archive, sum, d.File, strings.ToLower(want), shellq.Quote(archive), fetchCommand(d, filepath.Dir(archive)))
	}
	return nil
}

// depRevision checks a found copy and returns what to record for it.
func depRevision(d Dep) (string, error) {
	repo, err := gitsrc.Open(d.Dir)
	if err != nil {
		sum, herr := hashTree(d.Dir)
		if herr != nil {
			return "", fmt.Errorf("dependency %s at %s: %w", d.Name, d.Dir, herr)
		}
		return "sha256:" + sum, nil
	}
	head, err := repo.Head()
	if err != nil {
		return "", fmt.Errorf("dependency %s at %s: %w", d.Name, d.Dir, err)
	}
	if pin := d.Pin(); pin != "" {
		want, err := repo.Resolve(pin)
		if err != nil {
			return "", fmt.Errorf("dependency %s at %s: %s pins %s, which that checkout does not have; fetch it there (`%s`)", d.Name, d.Dir, d.File, pin, shellq.Join([]string{"git", "-C", d.Dir, "fetch", "origin", pin}))
		}
		if want != head {
			return "", fmt.Errorf("dependency %s at %s is at %s, but %s pins %s (%s); run `%s`",
				d.Name, d.Dir, githash.Hash(head).Short(), d.File, pin, githash.Hash(want).Short(), shellq.Join([]string{"git", "-C", d.Dir, "checkout", pin}))
		}
	}
	changes, err := repo.Changes()
	if err != nil {
		return "", fmt.Errorf("dependency %s at %s: git status: %w", d.Name, d.Dir, err)
	}
	var edited []string
	for _, c := range changes {
		edited = append(edited, c.String())
	}
	if len(edited) > 0 {
		if len(edited) > 5 {
			edited = append(edited[:5], fmt.Sprintf("... and %d more", len(edited)-5))
		}
		return "", fmt.Errorf("dependency %s at %s has local changes or untracked files, which the cache key would not see:\n  %s\nrun `%s` (or use a clean clone at %s)",
			d.Name, d.Dir, strings.Join(edited, "\n  "), shellq.Join([]string{"git", "-C", d.Dir, "stash", "-u"}), githash.Hash(head).Short())
	}
	return head, nil
}

// hashTree returns the hex sha256 over every regular file's path, mode
// and content under dir, in path order. dir itself may be a symlink (it is
// resolved); a symlink inside counts by its target and, when that is a
// file, the file's content, since the build reads through it.
func hashTree(dir string) (string, error) {
	h := sha256.New()
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if e.IsDir() {
			if e.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%o\x00", filepath.ToSlash(rel), info.Mode())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			io.WriteString(h, t)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				if err := hashFile(h, p); err != nil {
					return err
				}
			}
		case info.Mode().IsRegular():
			if err := hashFile(h, p); err != nil {
				return err
			}
		}
		h.Write([]byte{0})
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// candidates are the directory names a copy of d may have in --deps-dir:
// its name, its name without "repo-", and its repository's base name
// ("cutlass"), the last only when no other dep shares it (upstream pins
// two cutlass commits in the July tree).
func candidates(d Dep, shared map[string]int) []string {
	c := []string{d.Name, strings.TrimPrefix(d.Name, "repo-")}
	if b := repoBase(d); b != "" && shared[b] == 1 {
		c = append(c, b)
	}
	return c
}

func repoBase(d Dep) string {
	if i := strings.Index(d.Repo, "/archive/"); i >= 0 { // https://host/NVIDIA/cutlass/archive/<rev>.tar.gz
		return path.Base(d.Repo[:i])
	}
	if d.Repo != "" {
		return strings.TrimSuffix(path.Base(d.Repo), ".git")
	}
	return ""
}

func pinOrNone(s string) string {
	if s == "" {
		return "(no pin)"
	}
	return s
}

func hashFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read-only: Close has nothing to report
	_, err = io.Copy(w, f)
	return err
}
