package gaterule

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/arpatch/arpatch/internal/pyenv"
)

//go:embed py
var pyFS embed.FS

// ErrNoPython is returned when no python3 is found: the Python judge runs
// the tree's gate modules under it.
var ErrNoPython = errors.New("no python3 on PATH (or $ARPATCH_PYTHON): the Python side of the gate rule imports the tree's gate modules")

// pyRank is one emulated rank's answer (py/judge.py, one_rank).
type pyRank struct {
	Rank       int           `json:"rank"`
	Class      string        `json:"class"`
	Legacy     bool          `json:"legacy"`
	Init       string        `json:"init"`
	Where      string        `json:"where"`
	Enabled    bool          `json:"enabled"`
	MaxSize    *uint64       `json:"max_size"`
	Admit      []any         `json:"admit"`   // per probe: true, false or "raise: ..."
	Reduced    []any         `json:"reduced"` // per probe: true, false, null or "raise: ..."
	KernelInit *pyKernelInit `json:"kernel_init"`
}

// pyKernelInit is what the gate code handed sgl-kernel's init_custom_ar:
// full_nvlink and the environment its constructor reads.
type pyKernelInit struct {
	FullNVLink bool              `json:"full_nvlink"`
	Ptrs       int               `json:"ptrs"`
	Env        map[string]string `json:"env"`
}

// pyWS is one world size of one scenario: Import is the error importing
// the gate modules, else Ranks holds every rank.
type pyWS struct {
	WS     int       `json:"ws"`
	Import string    `json:"import"`
	Where  string    `json:"where"`
	Ranks  []*pyRank `json:"ranks"`
}

// pyScenario is one environment and what the gates did under it.
type pyScenario struct {
	Env     map[string]string `json:"env"`
	Results []pyWS            `json:"results"`
}

// pyReport is the Python judge's answer: every scenario it ran, and the
// variables the gates read.
type pyReport struct {
	Scenarios []pyScenario `json:"scenarios"`
	Names     []string     `json:"names"`
}

// pyPlan is what the Python judge is asked (py/judge.py, main).
type pyPlan struct {
	WS            []int               `json:"ws"`
	Probes        []uint64            `json:"probes"`
	Values        map[string][]string `json:"values"`
	DefaultValues []string            `json:"default_values"`
	ExtraNames    []string            `json:"extra_names"`
	Changed       []string            `json:"changed"`
	MaxScenarios  int                 `json:"max_scenarios"`
}

// python3 returns the interpreter the Python judge runs (findPython,
// asked once per process; tests swap it).
var python3 = findPython

// findPython returns $ARPATCH_PYTHON, else what python3 on PATH runs
// (sys.executable, so that a version manager's shim starts once, not for
// every judgement), or ErrNoPython. The answer is kept by the
// interpreter's exeStamp, so a later process starts no interpreter.
var findPython = sync.OnceValues(func() (string, error) {
	py := os.Getenv("ARPATCH_PYTHON")
	if py == "" {
		py = "python3"
	}
	path, err := exec.LookPath(py)
	if err != nil {
		return "", fmt.Errorf("%w (%v)", ErrNoPython, err)
	}
	var exe, version string
	ans, err := exeAnswer(path, "python", func() (string, error) {
		exe, version, err = pyenv.Executable(path)
		if err == nil && version == "" {
			err = errNoAnswer // run as it is, asked again next time
		}
		return exe + "\n" + version, err
	})
	switch {
	case err == nil:
		exe, version, _ = strings.Cut(ans, "\n")
	case err != errNoAnswer:
		return "", fmt.Errorf("%w (%v)", ErrNoPython, err)
	}
	pyVersion = version
	return exe, nil
})

// errNoAnswer is an executable's answer about itself not to keep.
var errNoAnswer = errors.New("no answer to keep")

// pyVersion is the interpreter's sys.version (findPython), part of every
// cached judgement's key.
var pyVersion string

var pyDir = sync.OnceValues(func() (string, error) {
	h := sha256.New()
	ents, err := pyFS.ReadDir("py")
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		b, _ := pyFS.ReadFile("py/" + e.Name())
		fmt.Fprintf(h, "%s\x00%d\x00%s", e.Name(), len(b), b)
	}
	dir := filepath.Join(cacheDir(), "py-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "judge.py")); err == nil {
		return dir, nil
	}
	tmp := dir + fmt.Sprintf(".%d.tmp", os.Getpid())
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	for _, e := range ents {
		b, _ := pyFS.ReadFile("py/" + e.Name())
		if err := os.WriteFile(filepath.Join(tmp, e.Name()), b, 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp) // another process put the same files there first
	}
	return dir, nil
})

// treeFiles answers the Python judge's reads: a file, a directory or
// nothing, tree-relative. It records every answer (the judgement's
// inputs, for the cache) as ident gives it.
type treeFiles struct {
	read   Reader
	isDir  func(string) bool
	blobID func(string) (string, error) // Input.BlobID; nil: every file is read
	seen   map[string]string            // path: "F"+git blob id, "D" or "N"
}

// blobOf is git's blob id of b, as `git hash-object` gives it (go-git's
// plumbing.ComputeHash), so that a file read and a file whose id a
// tree's objects or index hold (Input.BlobID) answer alike.
func blobOf(b []byte) string { return plumbing.ComputeHash(plumbing.BlobObject, b).String() }

func (t *treeFiles) answer(w io.Writer, p string) error {
	b, err := t.read(p)
	switch {
	case err == nil:
		t.seen[p] = "F" + blobOf(b)
		if _, err := fmt.Fprintf(w, "F %d\n", len(b)); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case errors.Is(err, fs.ErrNotExist):
		t.seen[p] = t.absent(p)
		_, err = io.WriteString(w, t.seen[p]+"\n")
		return err
	default:
		return err
	}
}

func (t *treeFiles) absent(p string) string {
	if t.isDir != nil && t.isDir(p) {
		return "D"
	}
	return "N"
}

// ident is what answer would record for p, read as cheaply as the tree
// allows: the blob id the tree holds (Input.BlobID, no bytes read), else
// the file read and hashed. Its error is the read's (a file that is
// neither regular nor absent).
func (t *treeFiles) ident(p string) (string, error) {
	if t.blobID != nil {
		id, err := t.blobID(p)
		switch {
		case err == nil && id != "":
			return "F" + id, nil
		case errors.Is(err, fs.ErrNotExist):
			return t.absent(p), nil
		}
	}
	b, err := t.read(p)
	switch {
	case err == nil:
		return "F" + blobOf(b), nil
	case errors.Is(err, fs.ErrNotExist):
		return t.absent(p), nil
	default:
		return "", err
	}
}

// runPython runs py/judge.py on the tree with plan, serving its reads.
// It returns the report and what it read, ErrNoPython, or an error saying
// why the judge did not answer.
func runPython(ctx context.Context, files *treeFiles, plan pyPlan) (*pyReport, error) {
	py, err := python3()
	if err != nil {
		return nil, err
	}
	dir, err := pyDir()
	if err != nil {
		return nil, err
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer func() { _ = reqR.Close() }() // a pipe: nothing to lose
	ansR, ansW, err := os.Pipe()
	if err != nil {
		_ = reqW.Close() // a pipe: nothing to lose
		return nil, err
	}
	defer func() { _ = ansW.Close() }() // closed below; again is harmless
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	in, _ := json.Marshal(plan)
	cmd := exec.CommandContext(ctx, py, "-I", "-S", "-B", filepath.Join(dir, "judge.py"))
	cmd.Env = []string{"PYTHONHASHSEED=0", "LC_ALL=C.UTF-8"}
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.ExtraFiles = []*os.File{reqW, ansR} // fds 3 and 4
	err = cmd.Start()
	_ = reqW.Close() // the child's ends: this process keeps none
	_ = ansR.Close()
	if err != nil {
		return nil, err
	}
	rep, serr := serve(reqR, ansW, files)
	_ = ansW.Close() // the judge reads its end of file and stops
	werr := cmd.Wait()
	if serr != nil {
		return nil, serr
	}
	if rep == nil {
		return nil, fmt.Errorf("the Python gate judge ended without an answer (%v): %s", werr, lastLines(stderr.String(), 6))
	}
	return rep, nil
}

func serve(req io.Reader, ans io.Writer, files *treeFiles) (*pyReport, error) {
	r := bufio.NewReaderSize(req, 1<<16)
	w := bufio.NewWriter(ans)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, nil // the judge ended; its exit says why
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "read "):
			if err := files.answer(w, line[len("read "):]); err != nil {
				return nil, fmt.Errorf("the Python gate judge read %s: %w", strconv.Quote(line[5:]), err)
			}
			if err := w.Flush(); err != nil {
				return nil, nil
			}
		case strings.HasPrefix(line, "result "):
			var rep pyReport
			if err := json.Unmarshal([]byte(line[len("result "):]), &rep); err != nil {
				return nil, fmt.Errorf("the Python gate judge's answer: %v", err)
			}
			return &rep, nil
		default:
			return nil, fmt.Errorf("the Python gate judge wrote %q", firstLine(line))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
