package gaterule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// The Python judge's answers are kept with every read each made: the
// path and what the tree held there, its git blob id ("F"+id), a
// directory ("D") or nothing ("N"). The judge reads the tree through
// treeFiles and nothing else (it runs isolated, -I -S, with the tree off
// sys.path, so no .pth or sitecustomize of the tree is read), and it
// records the absent paths its finder tried as well as the files it
// read: a tree that answers every one of those reads the same gets the
// same answer. A new package or module that would shadow an imported one
// is at a path the finder tried and recorded as absent; a changed
// dependency or patched file has another blob id.
//
// They are kept in this process and under verdictRoot()/<plan key> (the
// plan, the interpreter and the judge's own files: planKey) by what they
// read, content-addressed, so that nothing is ever rewritten in place:
//
//   - sets/<hash>.json: the sorted paths one judgement read (its read
//     set), named by their hash; commits near each other import the same
//     modules, so a few sets serve many answers;
//   - answers/<hash>.json: an answer and its reads, named by the hash of
//     its read set's hash and the answers at its paths.
//
// A lookup hashes the tree's answers at each kept read set's paths (each
// path asked once, by blob id where the tree has one: Input.BlobID) and
// opens the answer of that name, whose reads must equal the tree's.
// At most keepSets read sets and keepAnswers answers a plan are kept on
// disk, the least recently used removed first.
const (
	keepSets    = 64
	keepAnswers = 1024
)

type pyCached struct {
	Seen map[string]string `json:"seen"`
	Rep  *pyReport         `json:"report"`
}

// readSet is one kept read set: its hash and its sorted paths.
type readSet struct {
	hash  string
	paths []string
}

// planStore is what this process holds of one plan's kept answers.
type planStore struct {
	sets    []readSet            // most recently used first
	answers map[string]*pyCached // answer hash: answer
}

var pyMemory struct {
	sync.Mutex
	m map[string]*planStore // plan key
}

// verdictRoot is where the answers are kept across runs (tests swap it).
var verdictRoot = func() string { return filepath.Join(cacheDir(), "python-answers") }

// planKey is the hash of everything a judgement depends on besides the
// tree: the plan, the interpreter and the judge's files.
func planKey(plan pyPlan, py string) string {
	b, _ := json.Marshal(plan)
	dir, _ := pyDir()
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%s\x00%s", b, py, pyVersion, filepath.Base(dir))))
	return hex.EncodeToString(sum[:])[:32]
}

func setHash(paths []string) string {
	h := sha256.New()
	for _, p := range paths {
		fmt.Fprintf(h, "%s\n", p)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// answerHash names an answer by its read set and what the tree held at
// each of the set's paths (ident).
func answerHash(s readSet, ident func(string) (string, error)) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", s.hash)
	for _, p := range s.paths {
		id, err := ident(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%s\n", p, id)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// store returns this process's copy of a plan's kept answers, the read
// sets listed from disk the first time.
func store(key string) *planStore {
	pyMemory.Lock()
	defer pyMemory.Unlock()
	if pyMemory.m == nil {
		pyMemory.m = map[string]*planStore{}
	}
	if st := pyMemory.m[key]; st != nil {
		return st
	}
	st := &planStore{answers: map[string]*pyCached{}}
	for _, f := range newestFirst(filepath.Join(verdictRoot(), key, "sets")) {
		b, err := os.ReadFile(f)
		var paths []string
		if err != nil || json.Unmarshal(b, &paths) != nil || !sort.StringsAreSorted(paths) {
			continue
		}
		h := strings.TrimSuffix(filepath.Base(f), ".json")
		if setHash(paths) == h {
			st.sets = append(st.sets, readSet{h, paths})
		}
	}
	pyMemory.m[key] = st
	return st
}

// lookupVerdict returns a kept answer for the tree, or nil.
func lookupVerdict(key string, files *treeFiles) (*pyReport, map[string]string) {
	st := store(key)
	pyMemory.Lock()
	sets := slices.Clone(st.sets)
	pyMemory.Unlock()
	ids := map[string]string{} // each path asked of the tree once
	ident := func(p string) (string, error) {
		if id, ok := ids[p]; ok {
			return id, nil
		}
		id, err := files.ident(p)
		if err == nil {
			ids[p] = id
		}
		return id, err
	}
	for _, s := range sets {
		h, err := answerHash(s, ident)
		if err != nil {
			continue // the judge's run meets the same read and says so
		}
		pyMemory.Lock()
		c := st.answers[h]
		pyMemory.Unlock()
		if c == nil {
			c = readAnswer(key, h)
		}
		if c == nil || !sameReads(c.Seen, s.paths, ids) {
			continue
		}
		keep(key, s, h, c)
		return c.Rep, c.Seen
	}
	return nil, nil
}

// sameReads reports whether seen holds exactly paths, each answered as
// ids says (a hash's name is checked against what it names).
func sameReads(seen map[string]string, paths []string, ids map[string]string) bool {
	if len(seen) != len(paths) {
		return false
	}
	for _, p := range paths {
		if v, ok := seen[p]; !ok || v != ids[p] {
			return false
		}
	}
	return true
}

func readAnswer(key, h string) *pyCached {
	f := filepath.Join(verdictRoot(), key, "answers", h+".json")
	b, err := os.ReadFile(f)
	var c pyCached
	if err != nil || json.Unmarshal(b, &c) != nil || c.Rep == nil || len(c.Rep.Scenarios) == 0 {
		return nil
	}
	now := time.Now()
	_ = os.Chtimes(f, now, now) // kept longest when used
	return &c
}

// keep puts an answer and its read set first in this process's copy.
func keep(key string, s readSet, h string, c *pyCached) {
	st := store(key)
	pyMemory.Lock()
	defer pyMemory.Unlock()
	st.answers[h] = c
	i := slices.IndexFunc(st.sets, func(x readSet) bool { return x.hash == s.hash })
	if i == 0 {
		return
	}
	if i > 0 {
		st.sets = slices.Delete(st.sets, i, i+1)
	}
	st.sets = slices.Insert(st.sets, 0, s)
}

// storeVerdict keeps an answer in memory and on disk (each file written
// whole and renamed into place, the least recently used beyond keepSets
// and keepAnswers removed); a disk that cannot take it loses only the
// speed.
func storeVerdict(key string, c *pyCached) {
	paths := slices.Sorted(maps.Keys(c.Seen))
	s := readSet{setHash(paths), paths}
	h, _ := answerHash(s, func(p string) (string, error) { return c.Seen[p], nil })
	keep(key, s, h, c)
	dir := filepath.Join(verdictRoot(), key)
	sets := filepath.Join(dir, "sets")
	answers := filepath.Join(dir, "answers")
	if os.MkdirAll(sets, 0o755) != nil || os.MkdirAll(answers, 0o755) != nil {
		return
	}
	setFile := filepath.Join(sets, s.hash+".json")
	if _, err := os.Stat(setFile); err == nil {
		now := time.Now()
		_ = os.Chtimes(setFile, now, now) // kept longest when used
	} else if b, err := json.Marshal(paths); err == nil && !writeWhole(setFile, b) {
		return
	}
	b, err := json.Marshal(c)
	if err != nil || !writeWhole(filepath.Join(answers, h+".json"), b) {
		return
	}
	for _, d := range []struct {
		dir  string
		keep int
	}{{sets, keepSets}, {answers, keepAnswers}} {
		all := newestFirst(d.dir)
		for _, old := range all[min(len(all), d.keep):] {
			_ = os.Remove(old) // the least recently used: only the speed is lost
		}
	}
}

// writeWhole writes b to name through a temporary file renamed into
// place, so that a reader sees all of it or nothing.
func writeWhole(name string, b []byte) bool {
	tmp := fmt.Sprintf("%s.%d.tmp", name, os.Getpid())
	if os.WriteFile(tmp, b, 0o644) != nil || os.Rename(tmp, name) != nil {
		_ = os.Remove(tmp) // the cache is only a cache
		return false
	}
	return true
}

// newestFirst lists the .json files of dir, most recently modified first.
func newestFirst(dir string) []string {
	ents, err := os.ReadDir(dir)
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
			fs = append(fs, f{filepath.Join(dir, e.Name()), info.ModTime()})
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].at.After(fs[j].at) })
	out := make([]string, len(fs))
	for i, x := range fs {
		out[i] = x.path
	}
	return out
}

// judgePython runs the Python judge on the tree, or answers from what
// was kept; with the answer, every path of the tree the judge read.
func judgePython(ctx context.Context, in Input, plan pyPlan) (*pyReport, map[string]string, error) {
	py, err := python3()
	if err != nil {
		return nil, nil, err
	}
	key := planKey(plan, py)
	files := &treeFiles{read: in.Read, isDir: in.IsDir, blobID: in.BlobID, seen: map[string]string{}}
	if rep, seen := lookupVerdict(key, files); rep != nil {
		return rep, seen, nil
	}
	rep, err := runPython(ctx, files, plan)
	if err != nil {
		return nil, nil, err
	}
	storeVerdict(key, &pyCached{Seen: files.seen, Rep: rep})
	return rep, files.seen, nil
}
