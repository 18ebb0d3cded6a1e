package gaterule

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cxxScenario is one construction of CustomAllreduce by the judge: rank
// Rank of WS ranks, full_nvlink NVL, Cap bytes of scratch and buffer, and
// the environment its constructor and every call see (nothing else).
type cxxScenario struct {
	WS, Rank int
	NVL      bool
	Cap      uint64
	Env      map[string]string
	// Calls is which calls to make, bits of callBits ("eager float32" is
	// bit 0 ... "graph bfloat16" bit 5); 0 means all.
	Calls uint
}

// callBits name the driver's calls in the order of their bits.
var callBits = []string{"eager float32", "eager float16", "eager bfloat16", "graph float32", "graph float16", "graph bfloat16"}

// cxxRunOf is a run of sizes that did the same: Kind "one" (exactly one
// launch of a non-empty grid, of Kernel), "throw" (What), "none" (no
// launch), "many" (N launches, the first two Kernel and Second), "empty"
// (one launch of Kernel with an empty or oversized Grid or Block), "wrong"
// (one launch of a kernel arpatch knows, What says how it is not the
// call's).
type cxxRunOf struct {
	From, To    uint64
	Kind        string
	Kernel      string
	Second      string
	What        string
	N           int
	Grid, Block [3]uint64
	Mode, DType string
}

// cxxResult is what one scenario did: Init is "" when the constructor
// returned, else what it threw; Runs are keyed "eager float32" and so on.
type cxxResult struct {
	Scenario cxxScenario
	Init     string
	Runs     map[string][]cxxRunOf
	// WorldField and NVLinkField are the members world_size_ and
	// full_nvlink_ (0 or 1) as the constructor set them, -1 where the
	// class has no such member: the values the path proof folds their
	// loads to (irproof.go).
	WorldField, NVLinkField int
}

// cxxReport is a whole run of the judge driver. Stopped is "crash",
// "hang" or "abort" when it did not finish, At the call it was in.
type cxxReport struct {
	Results []cxxResult
	Getenv  []string
	Stopped string
	At      string
}

var runCache = struct {
	sync.Mutex
	m map[string]*cxxReport
}{m: map[string]*cxxReport{}}

// runJudge runs the compiled judge on scenarios at sizes (bytes), or
// answers from the reports of this process: the same binary given the
// same input answers the same.
func runJudge(ctx context.Context, bin string, sizes []uint64, scs []cxxScenario) (*cxxReport, error) {
	in := judgeInput(sizes, scs)
	sum := sha256.Sum256(append([]byte(bin+"\x00"), in...))
	key := hex.EncodeToString(sum[:])
	runCache.Lock()
	rep, ok := runCache.m[key]
	runCache.Unlock()
	if ok {
		return rep, nil
	}
	if rep := loadRun(bin, key); rep != nil {
		return rep, nil
	}
	rep, err := execJudge(ctx, bin, in, scs)
	if err != nil {
		return nil, err
	}
	storeRun(bin, key, rep)
	runCache.Lock()
	if len(runCache.m) > 256 {
		clear(runCache.m)
	}
	runCache.m[key] = rep
	runCache.Unlock()
	return rep, nil
}

// runFile is where a report of bin on the input of key is kept: beside
// the binary, in its content-keyed cache entry.
func runFile(bin, key string) string {
	return filepath.Join(filepath.Dir(bin), "runs", key[:32]+".json")
}

func loadRun(bin, key string) *cxxReport {
	b, err := os.ReadFile(runFile(bin, key))
	if err != nil {
		return nil
	}
	var rep cxxReport
	if json.Unmarshal(b, &rep) != nil || len(rep.Results) == 0 {
		return nil
	}
	return &rep
}

// storeRun keeps rep (atomically; a disk that cannot take it loses only
// the speed), at most keepRuns a binary.
func storeRun(bin, key string, rep *cxxReport) {
	b, err := json.Marshal(rep)
	if err != nil || rep.Stopped != "" {
		return
	}
	f := runFile(bin, key)
	if os.MkdirAll(filepath.Dir(f), 0o755) != nil {
		return
	}
	tmp := fmt.Sprintf("%s.%d.tmp", f, os.Getpid())
	if os.WriteFile(tmp, b, 0o644) != nil || os.Rename(tmp, f) != nil {
		_ = os.Remove(tmp) // the cache is only a cache
		return
	}
	if ents, err := os.ReadDir(filepath.Dir(f)); err == nil && len(ents) > keepRuns {
		_ = os.RemoveAll(filepath.Dir(f)) // too many: start again
	}
}

const keepRuns = 256

// judgeInput is the driver's input (cxx/judge.cu).
func judgeInput(sizes []uint64, scs []cxxScenario) []byte {
	var in bytes.Buffer
	fmt.Fprintf(&in, "sizes %d", len(sizes))
	for _, s := range sizes {
		fmt.Fprintf(&in, " %d", s)
	}
	in.WriteString("\n")
	for i, sc := range scs {
		nvl := 0
		if sc.NVL {
			nvl = 1
		}
		keys := sortedKeys(sc.Env)
		calls := sc.Calls
		if calls == 0 {
			calls = 1<<len(callBits) - 1
		}
		fmt.Fprintf(&in, "scenario %d %d %d %d %d %d %d\n", i, sc.WS, sc.Rank, nvl, sc.Cap, calls, len(keys))
		for _, k := range keys {
			fmt.Fprintf(&in, "%s=%s\n", k, strings.ReplaceAll(sc.Env[k], "\n", " "))
		}
	}
	return in.Bytes()
}

func execJudge(ctx context.Context, bin string, in []byte, scs []cxxScenario) (*cxxReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{}
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	rep, perr := parseReport(out, scs)
	if perr != nil {
		return nil, fmt.Errorf("the gate judge's report: %v (%v; %s)", perr, err, firstLine(stderr.String()))
	}
	if rep.Stopped == "" && err != nil {
		return nil, fmt.Errorf("the gate judge: %v: %s", err, firstLine(stderr.String()))
	}
	return rep, nil
}

func parseReport(out []byte, scs []cxxScenario) (*cxxReport, error) {
	rep := &cxxReport{}
	byID := map[int]*cxxResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	done := false
	for sc.Scan() {
		var line struct {
			Scenario *int              `json:"scenario"`
			Init     string            `json:"init"`
			World    *int              `json:"world_size"`
			NVLink   *int              `json:"full_nvlink"`
			What     string            `json:"what"`
			Mode     string            `json:"mode"`
			DType    string            `json:"dtype"`
			Runs     []json.RawMessage `json:"runs"`
			Getenv   []string          `json:"getenv"`
			Stopped  string            `json:"stopped"`
			At       string            `json:"at"`
			Done     bool              `json:"done"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("%v in %q", err, firstLine(sc.Text()))
		}
		switch {
		case line.Done:
			done = true
		case line.Stopped != "":
			rep.Stopped, rep.At = line.Stopped, line.At
		case line.Getenv != nil:
			rep.Getenv = line.Getenv
		case line.Scenario != nil && *line.Scenario >= 0 && *line.Scenario < len(scs):
			id := *line.Scenario
			r := byID[id]
			if r == nil {
				rep.Results = append(rep.Results, cxxResult{Scenario: scs[id], Runs: map[string][]cxxRunOf{}, WorldField: -1, NVLinkField: -1})
				r = &rep.Results[len(rep.Results)-1]
				byID[id] = r
			}
			if line.Init == "throw" {
				r.Init = line.What
			}
			if line.World != nil && line.NVLink != nil {
				r.WorldField, r.NVLinkField = *line.World, *line.NVLink
			}
			if line.Mode != "" {
				runs, err := parseRuns(line.Runs, line.Mode, line.DType)
				if err != nil {
					return nil, err
				}
				r.Runs[line.Mode+" "+line.DType] = runs
			}
		default:
			return nil, fmt.Errorf("unexpected line %q", firstLine(sc.Text()))
		}
	}
	if !done && rep.Stopped == "" {
		return nil, fmt.Errorf("it ended without its last line")
	}
	return rep, nil
}

func parseRuns(raw []json.RawMessage, mode, dtype string) ([]cxxRunOf, error) {
	var out []cxxRunOf
	for _, r := range raw {
		var f []json.RawMessage
		if err := json.Unmarshal(r, &f); err != nil || len(f) < 3 {
			return nil, fmt.Errorf("bad run %s", r)
		}
		run := cxxRunOf{Mode: mode, DType: dtype}
		var strs []string
		var nums []uint64
		for i, x := range f {
			var s string
			var n uint64
			switch {
			case json.Unmarshal(x, &s) == nil:
				strs = append(strs, s)
			case json.Unmarshal(x, &n) == nil:
				if i == 0 {
					run.From = n
				} else if i == 1 {
					run.To = n
				} else {
					nums = append(nums, n)
				}
			default:
				return nil, fmt.Errorf("bad run %s", r)
			}
		}
		if len(strs) == 0 {
			return nil, fmt.Errorf("bad run %s", r)
		}
		run.Kind = strs[0]
		switch run.Kind {
		case "one":
			run.Kernel = at(strs, 1)
		case "throw":
			run.What = at(strs, 1)
		case "many":
			run.Kernel, run.Second = at(strs, 1), at(strs, 2)
			if len(nums) > 0 {
				run.N = int(nums[0])
			}
		case "wrong":
			run.Kernel, run.What = at(strs, 1), at(strs, 2)
		case "empty":
			run.Kernel = at(strs, 1)
			for i := 0; i < 6 && i < len(nums); i++ {
				if i < 3 {
					run.Grid[i] = nums[i]
				} else {
					run.Block[i-3] = nums[i]
				}
			}
		}
		out = append(out, run)
	}
	return out, nil
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(l) > 300 {
		l = l[:300] + "..."
	}
	return l
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// literalRe finds the decimal literals of a header: the byte cuts a
// dispatch may compare a size with.
var literalRe = regexp.MustCompile(`\b[1-9][0-9]{3,9}\b`)

// judgeSizes are the allreduce sizes (bytes) the judge calls at, up to
// cap: every multiple of 16 up to 16 KiB (an empty tensor has nothing to
// reduce, so 0 is not asked), of 64 up to 64 KiB, every
// 4 KiB boundary and its neighbours 16 bytes either side, the powers of
// two and their neighbours, and each of extra (the Python gate's limits,
// the header's decimal literals) with its neighbours.
func judgeSizes(cap uint64, extra []uint64) []uint64 {
	set := map[uint64]bool{cap &^ 15: true}
	add := func(n uint64) {
		n &^= 15
		for _, m := range []uint64{n - 16, n, n + 16} {
			if m > 0 && m <= cap && m < 1<<62 {
				set[m] = true
			}
		}
	}
	for n := uint64(16); n <= 16384 && n <= cap; n += 16 {
		set[n] = true
	}
	for n := uint64(16384); n <= 65536 && n <= cap; n += 64 {
		set[n] = true
	}
	for n := uint64(4096); n <= cap; n += 4096 {
		add(n)
	}
	for n := uint64(16); n <= cap; n *= 2 {
		add(n)
	}
	for _, n := range extra {
		add(n)
		add(n + 15)
	}
	out := make([]uint64, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// headerLiterals returns the decimal literals of the source's files.
func headerLiterals(src cxxSource) []uint64 {
	var out []uint64
	for _, b := range src.Files {
		for _, m := range literalRe.FindAll(b, -1) {
			if n, err := strconv.ParseUint(string(m), 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
