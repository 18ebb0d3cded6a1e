package gaterule

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// freshAnswers gives the test an empty store of Python answers (on disk
// and in this process), put back afterwards.
func freshAnswers(t testing.TB) {
	t.Helper()
	dir := t.TempDir()
	orig := verdictRoot
	verdictRoot = func() string { return dir }
	forget()
	t.Cleanup(func() { verdictRoot = orig; forget() })
}

// forget drops this process's copy of the kept answers: the next lookup
// reads them from disk, as a new arpatch process does.
func forget() {
	pyMemory.Lock()
	pyMemory.m = nil
	pyMemory.Unlock()
}

// counted is the tree's input with git's blob ids (BlobID) and a count
// of the gate modules' reads: the Python judge reads them when it runs,
// and a kept answer is found without reading any.
func (t tree) counted(reads *atomic.Int32, changed ...string) Input {
	in := t.input(changed...)
	in.Read = func(p string) ([]byte, error) {
		if IsGateFile(p) {
			reads.Add(1)
		}
		return t.read(p)
	}
	in.BlobID = func(p string) (string, error) {
		b, err := t.read(p)
		if err != nil {
			return "", err
		}
		return blobOf(b), nil
	}
	return in
}

// A kept Python answer serves a tree whose every read (by blob id)
// answers as it did, and no other: a changed dependency, a new module or
// package that shadows an imported one, a changed gate module or a new
// top-level package before a stub each run the judge again and are
// judged by what they do; a changed dispatch or CMake file is judged
// again by the C++ side while the Python answer is kept.
func TestPythonAnswersKeptByWhatTheyRead(t *testing.T) {
	freshAnswers(t)
	distInit := "python/sglang/srt/distributed/__init__.py"
	shadow := gatesDir + "custom_all_reduce/__init__.py"
	base := pyTree(fixture(upstream))
	var reads atomic.Int32
	run := func(tr tree, changed ...string) (int32, error) {
		t.Helper()
		reads.Store(0)
		forget()
		_, err := judge(t, tr.counted(&reads, changed...))
		return reads.Load(), err
	}
	n, err := run(base, gatePy)
	refused(t, err, "")
	if n == 0 {
		t.Fatal("the first judgement read no gate module")
	}
	if n, err := run(base, gatePy); n != 0 || err != nil {
		t.Errorf("the same tree again: %d gate module reads (want 0, a kept answer), err %v", n, err)
	}
	for _, tc := range []struct {
		name    string
		tree    tree
		changed []string
		want    string
	}{
		{"a changed dependency (the distributed package's __init__)", base.with(distInit, monkeySrc), []string{gatePy}, "launches no kernel"},
		{"a new package that shadows the gate module", base.with(shadow, shadowSrc), []string{gatePy}, "launches no kernel"},
		{"a changed gate module", pyTree(fixture(upstream), open...), []string{gatePy}, "launches no kernel"},
		{"a new top-level package before the judge's torch stub", base.with("python/torch/__init__.py", "raise ImportError('the tree has its own torch')\n"), []string{gatePy},
			"the Python gates taken as open|launches no kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := run(tc.tree, tc.changed...)
			if n == 0 {
				t.Errorf("answered from a kept answer (no gate module read)")
			}
			refused(t, err, tc.want)
		})
	}
	t.Run("a changed dispatch", func(t *testing.T) {
		opened := pyTree(fixture(patchedElse), open...)
		if _, err := run(opened, gatePy); err != nil {
			t.Fatalf("the PCIe dispatch: %v", err)
		}
		moved := opened.with(cuhPath, string(fixture(upstream)))
		n, err := run(moved, gatePy)
		if n != 0 {
			t.Errorf("the Python side ran again (%d gate module reads) for a tree whose Python files are the same", n)
		}
		refused(t, err, "launches no kernel")
	})
	t.Run("a changed CMake file", func(t *testing.T) {
		const cmake = "sgl-kernel/CMakeLists.txt"
		opened := pyTree(fixture(patchedElse), open...)
		_, err := run(opened.with(cmake, "add_compile_definitions(ARPATCH_X)\n"), gatePy, cmake)
		refused(t, err, "in "+cmake+" as patched, the series changes a CMake file")
	})
}

// Files the judge never consults are not among an answer's reads, so
// adding them keeps the answer: it runs isolated (-I -S) with the tree
// off sys.path, so a .pth or sitecustomize.py of the tree is not
// processed (here they would open both gates, and the tree with them is
// accepted: the gates stay closed).
func TestPythonAnswerIgnoresFilesTheJudgeNeverReads(t *testing.T) {
	freshAnswers(t)
	base := pyTree(fixture(upstream))
	extra := base.with("python/sitecustomize.py", monkeySrc).with("python/arpatch.pth", "import sitecustomize\n").
		with("python/sglang/sitecustomize.py", monkeySrc)
	var reads atomic.Int32
	if _, err := judge(t, extra.counted(&reads, gatePy)); err != nil || reads.Load() == 0 {
		t.Fatalf("with a .pth and sitecustomize.py: %d gate module reads, err %v", reads.Load(), err)
	}
	pyMemory.Lock()
	for _, st := range pyMemory.m {
		for _, c := range st.answers {
			for p := range c.Seen {
				if strings.HasSuffix(p, ".pth") || strings.HasSuffix(p, "sitecustomize.py") {
					t.Errorf("the judge read %s", p)
				}
			}
		}
	}
	pyMemory.Unlock()
	forget()
	reads.Store(0)
	if _, err := judge(t, base.counted(&reads, gatePy)); err != nil || reads.Load() != 0 {
		t.Errorf("without them: %d gate module reads (want 0, the kept answer), err %v", reads.Load(), err)
	}
}

// BenchmarkJudgeKept is the judgement of a tree judged before, as apply
// on a clean checkout and patches check's later commits meet it: the
// Python answer found by blob id (from this process's copy, or from disk
// as a new process reads it), the compiled judge and its report by
// content. It reports the gate modules read per judgement (0: no Python
// file is read).
func BenchmarkJudgeKept(b *testing.B) {
	if _, err := Clang(); err != nil {
		b.Skip(err)
	}
	if _, err := findPython(); err != nil {
		b.Skip(err)
	}
	freshAnswers(b)
	tr := pyTree(fixture(patchedElse), open...)
	var reads atomic.Int32
	in := tr.counted(&reads, gatePy)
	if _, err := Judge(b.Context(), in); err != nil {
		b.Fatal(err)
	}
	for _, fromDisk := range []bool{false, true} {
		name := "memory"
		if fromDisk {
			name = "disk"
		}
		b.Run(name, func(b *testing.B) {
			reads.Store(0)
			for b.Loop() {
				if fromDisk {
					forget()
				}
				if _, err := Judge(b.Context(), in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(reads.Load())/float64(b.N), "gate-reads/op")
		})
	}
}

// pruneBuilds keeps the newest keepBuilds judges, the one just built, and
// every one this process answers from (builds), however old: pruning one
// of those made later calls read a judge that was gone.
func TestPruneKeepsHeldBuilds(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i := 0; i < keepBuilds+5; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%032d", i))
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(time.Duration(i-keepBuilds-5) * time.Minute)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	buildMu.Lock()
	saved := builds
	builds = map[string]string{"held": filepath.Join(paths[1], "judge")}
	pruneBuilds(paths[len(paths)-1])
	builds = saved
	buildMu.Unlock()
	for i, p := range paths {
		_, err := os.Stat(p)
		kept := err == nil
		want := i >= 5 || i == 1
		if kept != want {
			t.Errorf("entry %d (of %d, oldest first): kept %v, want %v", i, len(paths), kept, want)
		}
	}
}
