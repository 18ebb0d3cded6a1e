package gaterule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// The Python judge's answers are kept with every file each read (its
// path and content hash, or that it was a directory or absent): a tree
// that answers every one of those reads the same gets the same answer,
// since the judge reads nothing else. They are kept in this process and
// under cacheDir/python, by plan (which includes the interpreter and the
// judge's own files), at most keepVerdicts a plan, of which the newest 8
// are tried.
const keepVerdicts = 32

type pyCached struct {
	Seen map[string]string `json:"seen"`
	Rep  *pyReport         `json:"report"`
}

var pyMemory struct {
	sync.Mutex
	m map[string][]*pyCached // plan key: newest first
}

// planKey is the hash of everything a judgement depends on besides the
// tree: the plan, the interpreter and the judge's files.
func planKey(plan pyPlan, py string) string {
	b, _ := json.Marshal(plan)
	dir, _ := pyDir()
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%s\x00%s", b, py, pyVersion, filepath.Base(dir))))
	return hex.EncodeToString(sum[:])[:32]
}

// same reports whether the tree answers every read of c as it did,
// asking the gate modules' directory first (where trees differ most).
func (c *pyCached) same(files *treeFiles) bool {
	probe := &treeFiles{read: files.read, isDir: files.isDir, seen: map[string]string{}}
	paths := make([]string, 0, len(c.Seen))
	for p := range c.Seen {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool {
		gi, gj := strings.Contains(paths[i], "device_communicators/"), strings.Contains(paths[j], "device_communicators/")
		return gi && !gj || gi == gj && paths[i] < paths[j]
	})
	for _, p := range paths {
		want := c.Seen[p]
		if err := probe.answer(io.Discard, p); err != nil || probe.seen[p] != want {
			return false
		}
	}
	return true
}

func verdictDir(key string) string { return filepath.Join(cacheDir(), "python", key) }

// lookupVerdict returns a kept answer for the tree, or nil.
func lookupVerdict(key string, files *treeFiles) *pyReport {
	pyMemory.Lock()
	mem := append([]*pyCached(nil), pyMemory.m[key]...)
	pyMemory.Unlock()
	for _, c := range mem {
		if c.same(files) {
			return c.Rep
		}
	}
	disk := diskVerdicts(key)
	for _, f := range disk[:min(len(disk), 8)] {
		b, err := os.ReadFile(f)
		var c pyCached
		if err != nil || json.Unmarshal(b, &c) != nil || c.Rep == nil || len(c.Rep.Scenarios) == 0 {
			continue
		}
		if c.same(files) {
			now := time.Now()
			_ = os.Chtimes(f, now, now) // kept longest when used
			remember(key, &c)
			return c.Rep
		}
	}
	return nil
}

// diskVerdicts lists the kept answers of a plan, newest first.
func diskVerdicts(key string) []string {
	ents, err := os.ReadDir(verdictDir(key))
	if err != nil {
		return nil
	}
	type f struct {
		path string
		at   time.Time
	}
	var fs []f
	for _, e := range ents {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".json") {
			fs = append(fs, f{filepath.Join(verdictDir(key), e.Name()), info.ModTime()})
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].at.After(fs[j].at) })
	var out []string
	for _, x := range fs {
		out = append(out, x.path)
	}
	return out
}

func remember(key string, c *pyCached) {
	pyMemory.Lock()
	defer pyMemory.Unlock()
	if pyMemory.m == nil {
		pyMemory.m = map[string][]*pyCached{}
	}
	l := append([]*pyCached{c}, pyMemory.m[key]...)
	pyMemory.m[key] = l[:min(len(l), 8)]
}

// storeVerdict keeps an answer in memory and on disk (atomically, the
// oldest beyond keepVerdicts removed); a disk that cannot take it loses
// only the speed.
func storeVerdict(key string, c *pyCached) {
	remember(key, c)
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	dir := verdictDir(key)
	if os.MkdirAll(dir, 0o755) != nil {
		return
	}
	sum := sha256.Sum256(b)
	name := filepath.Join(dir, hex.EncodeToString(sum[:])[:32]+".json")
	tmp := fmt.Sprintf("%s.%d.tmp", name, os.Getpid())
	if os.WriteFile(tmp, b, 0o644) != nil || os.Rename(tmp, name) != nil {
		_ = os.Remove(tmp) // the cache is only a cache
		return
	}
	for _, old := range diskVerdicts(key)[min(len(diskVerdicts(key)), keepVerdicts):] {
		_ = os.Remove(old) // beyond keepVerdicts
	}
}

// judgePython runs the Python judge on the tree, or answers from what
// was kept.
func judgePython(ctx context.Context, read Reader, isDir func(string) bool, plan pyPlan) (*pyReport, error) {
	py, err := python3()
	if err != nil {
		return nil, err
	}
	key := planKey(plan, py)
	files := &treeFiles{read: read, isDir: isDir, seen: map[string]string{}}
	if rep := lookupVerdict(key, files); rep != nil {
		return rep, nil
	}
	rep, err := runPython(ctx, files, plan)
	if err != nil {
		return nil, err
	}
	storeVerdict(key, &pyCached{Seen: files.seen, Rep: rep})
	return rep, nil
}
