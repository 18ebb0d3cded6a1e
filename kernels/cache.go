package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/internal/safefs"
)

// ManifestSchema versions manifest.json.
const ManifestSchema = 1

// Output is one file a build produced.
type Output struct {
	File   string `json:"file"` // name inside the cache entry
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	// Sections are, for an ELF object (Manifest.Objects), its sections'
	// sizes and sha256 (names numbered as ElfSections numbers them), so
	// that a rebuild can name the sections that differ although the
	// objects themselves are not kept; empty for anything else.
	Sections []Section `json:"sections,omitempty"`
}

// Section is one ELF section of a recorded object: its name, its size in
// bytes and the sha256 of its contents (empty for SHT_NOBITS).
type Section struct {
	Name   string `json:"name"`
	Size   uint64 `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// Manifest is a cache entry's manifest.json: every input, the key, the
// outputs with their sha256, what ran, and how long it took.
type Manifest struct {
	Schema  int      `json:"schema"`
	Key     string   `json:"key"`
	Inputs  Inputs   `json:"inputs"`
	Outputs []Output `json:"outputs"`
	// Objects are the build's object files (*.o) by path under the build
	// dir, with their sha256: not kept, but named when two builds differ.
	Objects        []Output          `json:"objects,omitempty"`
	Dir            string            `json:"dir"`     // where the command ran
	Command        []string          `json:"command"` // argv
	Env            map[string]string `json:"env"`     // variables arpatch set
	Jobs           int               `json:"jobs"`
	Src            string            `json:"src"` // the checkout built
	StartedAt      time.Time         `json:"started_at"`
	FinishedAt     time.Time         `json:"finished_at"`
	ProbeSeconds   float64           `json:"probe_seconds"`
	BuildSeconds   float64           `json:"build_seconds"`
	Log            string            `json:"log"` // build.log, inside the entry
	ArpatchVersion string            `json:"arpatch_version"`
}

// Cache is a directory of build results, one subdirectory per key:
// <dir>/<key>/{manifest.json, build.log, outputs...}. Entries appear by
// an atomic rename of a finished temp directory, so a crashed or
// interrupted build leaves no entry.
type Cache struct {
	Dir string
}

// DefaultCacheDir is $ARPATCH_CACHE, else the user cache dir's
// arpatch/builds ($XDG_CACHE_HOME/arpatch/builds, else
// ~/.cache/arpatch/builds on Linux). With neither a cache variable nor
// HOME set it returns an error rather than pick a temporary directory a
// reboot empties.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("ARPATCH_CACHE"); d != "" {
		return d, nil
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "arpatch", "builds"), nil
	}
	return "", errors.New("no build cache directory: ARPATCH_CACHE, XDG_CACHE_HOME and HOME are all unset; set ARPATCH_CACHE to a directory, or pass --cache-dir (nightly: build.cache_dir)")
}

// EntryDir returns where the entry for key lives.
func (c Cache) EntryDir(key string) string { return filepath.Join(c.Dir, key) }

// Lookup returns the manifest of key's entry when the entry exists and
// every output still has its recorded sha256; a damaged entry is an error
// that names the file, so it is never used silently.
func (c Cache) Lookup(key string) (*Manifest, error) {
	dir := c.EntryDir(key)
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(dir); derr == nil {
			return nil, damaged(dir, "it has no manifest.json")
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, damaged(dir, fmt.Sprintf("manifest.json: %v", err))
	}
	switch {
	case m.Key != key:
		return nil, damaged(dir, fmt.Sprintf("its manifest is for key %s", digest.Short(m.Key)))
	case len(m.Outputs) == 0:
		return nil, damaged(dir, "its manifest lists no output")
	case m.Inputs.Key() != key:
		return nil, damaged(dir, "the inputs its manifest records do not hash to its key (edited?)")
	}
	for _, o := range m.Outputs {
		if o.File == "" || o.File != filepath.Base(o.File) || strings.HasPrefix(o.File, ".") {
			return nil, damaged(dir, fmt.Sprintf("output %q is not a file name inside the entry", o.File))
		}
		sum, _, err := fileSHA256(filepath.Join(dir, o.File))
		if err != nil || sum != o.SHA256 {
			return nil, damaged(dir, fmt.Sprintf("%s no longer has sha256 %s", o.File, o.SHA256))
		}
	}
	return &m, nil
}

// DamagedError is a cache entry that cannot be trusted; it is never used.
type DamagedError struct{ Dir, Why string }

func (e *DamagedError) Error() string {
	return fmt.Sprintf("cache entry %s is damaged: %s; remove it (rm -r %s, or arpatch build --gc) and build again", e.Dir, e.Why, e.Dir)
}

func damaged(dir, why string) error { return &DamagedError{Dir: dir, Why: why} }

// Begin makes a temp directory for a build of key inside the cache (same
// file system, so Commit's rename is atomic) and takes the key's lock. It
// returns an error naming the lock and its pid when another live build of
// the same key holds it. A lock whose build died (its pid is gone) is
// taken over, and that build's temp directories are removed.
func (c Cache) Begin(key string) (tmp string, release func(), err error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("cache %s: %w", c.Dir, err)
	}
	lockPath := filepath.Join(c.Dir, "."+key+".lock")
	release, err = lockfile.Acquire(lockPath)
	if err != nil {
		var held *lockfile.HeldError
		if errors.As(err, &held) {
			return "", nil, fmt.Errorf("another build of the same inputs is running (%s, pid %s); wait for it to finish", lockPath, held.PID)
		}
		return "", nil, err
	}
	// No arpatch builds this key now: any temp dir of it is a dead
	// build's leftover, unless that build's compilers outlived it (arpatch
	// killed with SIGKILL): then they still write there.
	old, _ := filepath.Glob(c.TempPattern(key))
	for _, d := range old {
		if g := lockfile.LiveGroup(filepath.Join(d, PGIDFile)); g > 0 {
			release()
			return "", nil, fmt.Errorf("a killed build of the same inputs left its processes running (process group %d, in %s); stop them (kill -- -%d) and build again", g, d, g)
		}
		// Best effort: this build uses a fresh temp below; one that stays
		// costs disk until Prune removes it.
		_ = os.RemoveAll(d)
	}
	tmp, err = os.MkdirTemp(c.Dir, tempPrefix(key))
	if err != nil {
		release()
		return "", nil, err
	}
	return tmp, release, nil
}

// Commit writes the manifest into tmp and renames tmp to key's entry.
func (c Cache) Commit(tmp string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := safefs.WriteFile(filepath.Join(tmp, "manifest.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	dst := c.EntryDir(m.Key)
	if err := os.RemoveAll(dst); err != nil { // a damaged entry Lookup refused
		return fmt.Errorf("replacing the damaged cache entry %s: %w", dst, err)
	}
	return os.Rename(tmp, dst)
}

// Entry is one cache entry, for --list.
type Entry struct {
	Key      string
	Manifest *Manifest
	Bytes    int64
	Err      error
}

// List returns the entries, newest first.
func (c Cache) List() ([]Entry, error) {
	ents, err := os.ReadDir(c.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range ents {
		if !e.IsDir() || !isKey(e.Name()) {
			continue
		}
		en := Entry{Key: e.Name(), Bytes: dirSize(filepath.Join(c.Dir, e.Name()))}
		en.Manifest, en.Err = c.Lookup(e.Name())
		if en.Manifest == nil && en.Err == nil {
			en.Err = errors.New("no manifest.json")
		}
		out = append(out, en)
	}
	sort.Slice(out, func(i, j int) bool {
		return finished(out[i]).After(finished(out[j]))
	})
	return out, nil
}

func finished(e Entry) time.Time {
	if e.Manifest == nil {
		return time.Time{}
	}
	return e.Manifest.FinishedAt
}

// GC keeps the newest keep valid entries and removes the rest, every
// damaged entry, and temp directories of builds that are no longer
// running. It returns the removed paths.
func (c Cache) GC(keep int) ([]string, error) {
	ents, err := c.List()
	if err != nil {
		return nil, err
	}
	var removed []string
	valid := 0
	for _, e := range ents {
		if e.Err == nil && valid < keep {
			valid++
			continue
		}
		p := c.EntryDir(e.Key)
		if err := os.RemoveAll(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	all, _ := os.ReadDir(c.Dir)
	for _, e := range all {
		if !strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		key16 := strings.SplitN(strings.TrimPrefix(e.Name(), ".tmp-"), "-", 2)[0]
		if locked(c.Dir, key16) || lockfile.LiveGroup(filepath.Join(c.Dir, e.Name(), PGIDFile)) > 0 {
			continue
		}
		p := filepath.Join(c.Dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// locked reports whether a live build holds a lock of a key starting
// with key16.
func locked(dir, key16 string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "."+key16+"*.lock"))
	for _, p := range m {
		if pid, ok := lockfile.ReadPID(p); ok && lockfile.Alive(pid) {
			return true
		}
	}
	return false
}

func dirSize(dir string) int64 {
	var n int64
	// The callback skips what it cannot read and returns no error, so
	// neither does the walk.
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func fileSHA256(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }() // read-only: Close has nothing to report
	return readerSHA256(f)
}

// readerSHA256 returns the hex sha256 of r's bytes and their number.
func readerSHA256(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// copyOut copies a cached output into dir, replacing a file of that name
// atomically. It copies rather than hardlinks: a tool that edits the copy
// in place (wheel retagging, auditwheel) must not reach the cache entry.
func copyOut(src, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, filepath.Base(src))
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer func() { _ = in.Close() }() // read-only: Close has nothing to report
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(src)+".tmp-*")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(tmp, in)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(tmp.Name()) // a hidden temp; err is what to report
		return "", err
	}
	return dst, nil
}

func isKey(name string) bool {
	if len(name) != 64 {
		return false
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// tempPrefix is the name prefix of a build's temp directory in the cache
// for key (a sha256 in hex, 64 characters): ".tmp-" and the key's first
// 16 hex digits, then "-".
func tempPrefix(key string) string { return ".tmp-" + key[:16] + "-" }

// TempPattern is the glob (filepath.Glob syntax) that matches every temp
// directory a build of key makes in this cache, as `build --plan` shows it.
func (c *Cache) TempPattern(key string) string {
	return filepath.Join(c.Dir, tempPrefix(key)+"*")
}
