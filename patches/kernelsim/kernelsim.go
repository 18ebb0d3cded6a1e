// Package kernelsim runs the pcie series' PCIe-only dispatch settings and
// push allreduce kernels on the CPU, with a host C++ compiler and no GPU,
// so that what the series' C++ does is judged by running it: the schedule
// and islands CustomAllreduce reads at init_custom_ar, the algorithm it
// picks for each size, and the exact sums its push kernels leave on every
// rank.
//
// The kernels are compiled for the host against small stub headers
// (cxx/*.h): every CUDA thread is a host thread, __syncthreads is a barrier
// of one block's threads, a rank is a set of blocks with its own stream
// (its calls run in order, each rank at its own pace). The kernels are
// compiled as nvcc's device pass for an arch (Source.Arch: what the GPU
// runs, __CUDA_ARCH__ defined, upstream's PTX flag stores and loads
// emulated by ptx.go, other inline assembly refused) or as the host pass
// (CustomAllreduce's members as the host runs them), both with the
// build's definitions (-DNDEBUG and the rest) and nvcc's macros. It runs what the series adds (the pcie_push_* kernels and
// CustomAllreduce's pcie_* members); upstream's pull kernels use inline PTX
// and are not run here (their sums are checked on a GPU by
// `arpatch bench allreduce`).
//
// Two sources: the patched custom_all_reduce.cuh itself (a real tree), or
// the series' added blocks on cxx/upstream.h, which restates the upstream
// definitions they use (CI, where no SGLang checkout exists).
//
// What the emulation cannot show: the GPU memory model's weaker orderings
// (the host's are stronger), L1 caching, timing, and PCIe itself.
package kernelsim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
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

	"github.com/arpatch/arpatch/internal/binstore"
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/sglkernel"
)

//go:embed cxx
var cxx embed.FS

// Source is the C++ kernelsim compiles: the patched header, or the series'
// added blocks.
type Source struct {
	// Header is a patched custom_all_reduce.cuh, whole. When set, the
	// blocks below are not used.
	Header string
	// Kernels, Members and Methods are the series' added blocks, each with
	// its #ifndef USE_MUSA guard: the device code (PcieIslands, the
	// barrier, the pcie_push_* kernels), CustomAllreduce's pcie_* data
	// members, and its pcie_* member functions.
	Kernels, Members, Methods string
	// Narrow builds the kernels for float32 at world size 8 alone, which
	// compiles several times faster; Reduce then refuses other cases.
	Narrow bool
	// Dispatch, with the blocks, is more of CustomAllreduce's members
	// (its register_buffer and allreduce, for a header the gate rule can
	// compile too); "" adds none.
	Dispatch string
	// Arch is the pass the C++ is compiled as. "" is nvcc's host pass (no
	// __CUDA_ARCH__), which is what CustomAllreduce's members run as; an
	// arch ("120a") is its device pass for that arch, which is what the
	// GPU runs of the kernels: __CUDA_ARCH__ and the arch's feature macros
	// defined (cudaarch.DeviceDefines), upstream's PTX flag stores and
	// loads emulated (ptx.go) and any other inline assembly refused
	// (*UnknownAsmError). Both passes have the build's definitions
	// (sglkernel.CUDAFlags: -DNDEBUG and the rest) and nvcc's macros
	// (cudaarch.NVCCDefines).
	Arch cudaarch.Arch
	// ParseOnly builds the driver's parse command alone, with no kernel
	// instantiated, which compiles in a fraction of the time; Reduce then
	// fails.
	ParseOnly bool
}

// Defines are the macros both passes are compiled with, as -D flags: the
// build's (sglkernel.CUDAFlags) and nvcc's (cudaarch.NVCCDefines).
func Defines() []string {
	f := sglkernel.Defines()
	for _, d := range cudaarch.NVCCDefines {
		f = append(f, "-D"+d)
	}
	return f
}

// Sim is a compiled driver.
type Sim struct {
	bin string
}

// ID names the driver by the content it was compiled from (its cache
// entry under Build's dir): two Sims with one ID run the same code.
func (s *Sim) ID() string { return filepath.Base(filepath.Dir(s.bin)) }

// ErrNoCompiler is returned by Build when no host C++ compiler is found.
var ErrNoCompiler = errors.New("no host C++ compiler ($CXX, c++, g++ or clang++) on PATH")

// Compiler returns the host C++ compiler: $CXX, else the first of c++, g++
// and clang++ on PATH.
func Compiler() (string, error) {
	if c := os.Getenv("CXX"); c != "" {
		return exec.LookPath(c)
	}
	for _, c := range []string{"c++", "g++", "clang++"} {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", ErrNoCompiler
}

var (
	buildMu sync.Mutex
	built   = map[string]*Sim{}
)

// launch matches a kernel launch's execution configuration, which a host
// compiler cannot read; the launch becomes a plain call, which nothing
// kernelsim compiles ever instantiates.
var launch = regexp.MustCompile(`<<<[^<>]*>>>`)

// Build compiles the driver for src into a directory under dir named by
// the content of everything it compiles (the compiler, the flags, the
// driver and stubs, the source), and returns it; a driver already there
// (from this process or an earlier one, its sha256 checked) is not
// compiled again. It returns ErrNoCompiler when there is no compiler, and
// the compiler's output when src does not compile.
func Build(ctx context.Context, dir string, src Source) (*Sim, error) {
	cc, err := Compiler()
	if err != nil {
		return nil, err
	}
	header, flags := src.Text(), append([]string{"-std=c++17", "-O0", "-pthread"}, Defines()...)
	if src.Narrow {
		flags = append(flags, "-DKERNELSIM_NARROW")
	}
	if src.ParseOnly {
		flags = append(flags, "-DKERNELSIM_PARSE_ONLY")
	}
	if src.Arch != "" {
		return buildDevice(ctx, dir, cc, flags, header, src.Arch)
	}
	h := sha256.New()
	fmt.Fprintf(h, "kernelsim-v3\x00%s\x00%s\x00%s", cc, strings.Join(flags, " "), header)
	for _, f := range cxxFiles() {
		fmt.Fprintf(h, "\x00%s\x00%d\x00%s", f.name, len(f.data), f.data)
	}
	entry := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:32])
	buildMu.Lock()
	defer buildMu.Unlock()
	if s, ok := built[entry]; ok {
		return s, nil
	}
	bin := filepath.Join(entry, "driver")
	if !binstore.Verified(bin) {
		if err := compileDriver(ctx, cc, flags, header, entry); err != nil {
			return nil, err
		}
	}
	s := &Sim{bin: bin}
	built[entry] = s
	return s, nil
}

// Text is the C++ kernelsim compiles for src: the header, or the
// series' blocks on upstream.h (BlocksHeader), with its launches made
// plain calls.
func (src Source) Text() string {
	if src.Header != "" {
		return launch.ReplaceAllString(src.Header, "")
	}
	return launch.ReplaceAllString(BlocksHeader(src), "")
}

// UpstreamH is cxx/upstream.h, which BlocksHeader includes: for a tree
// that holds a BlocksHeader as its dispatch header, beside it.
func UpstreamH() []byte {
	b, _ := cxx.ReadFile("cxx/upstream.h")
	return b
}

// writeSources writes the driver, the stubs and header (as kernels.h)
// into a new scratch directory under parent, and returns it.
func writeSources(parent, header string) (string, error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(parent, ".kernelsim-")
	if err != nil {
		return "", err
	}
	files, err := cxx.ReadDir("cxx")
	if err != nil {
		return "", err
	}
	for _, f := range files {
		b, _ := cxx.ReadFile("cxx/" + f.Name())
		if err := os.WriteFile(filepath.Join(dir, f.Name()), b, 0o644); err != nil {
			return "", err
		}
	}
	return dir, os.WriteFile(filepath.Join(dir, "kernels.h"), []byte(header), 0o644)
}

// buildDevice is Build for a device pass: it preprocesses the driver as
// nvcc's device pass for arch, emulates the PTX of the result (ptx.go)
// and compiles that. The entry is named by the emulated text, so archs
// whose passes preprocess alike share one driver (Sim.ID).
func buildDevice(ctx context.Context, dir, cc string, flags []string, header string, arch cudaarch.Arch) (*Sim, error) {
	src := sha256.New()
	fmt.Fprintf(src, "kernelsim-device-src\x00%s\x00%s\x00%s\x00%s", cc, strings.Join(flags, " "), arch, header)
	for _, f := range cxxFiles() {
		fmt.Fprintf(src, "\x00%s\x00%d\x00%s", f.name, len(f.data), f.data)
	}
	key := "src:" + hex.EncodeToString(src.Sum(nil))
	buildMu.Lock()
	s, ok := built[key]
	buildMu.Unlock()
	if ok {
		return s, nil
	}
	scratch, err := writeSources(dir, header)
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(scratch) }() // gone once renamed
	pp := append(append([]string{}, flags...), "-E", "-include", "ptx.h", "-iquote", scratch, "-I", scratch)
	for _, d := range arch.DeviceDefines() {
		pp = append(pp, "-D"+d)
	}
	pp = append(pp, filepath.Join(scratch, "driver.cc"))
	out, err := exec.CommandContext(ctx, cc, pp...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("kernelsim: %s does not preprocess the series' C++ as the device pass for %s: %v\n%s", filepath.Base(cc), arch.SM(), err, firstLines(stderr, 40))
	}
	// The scratch directory's name, in every linemarker, is not content.
	text, err := emulatePTX(strings.ReplaceAll(string(out), scratch+string(filepath.Separator), ""))
	if err != nil {
		return nil, fmt.Errorf("kernelsim: the device pass for %s: %w", arch.SM(), err)
	}
	compile := []string{"-std=c++17", "-O0", "-pthread", "-w"}
	h := sha256.New()
	fmt.Fprintf(h, "kernelsim-device-v1\x00%s\x00%s\x00%s", cc, strings.Join(compile, " "), text)
	entry := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:32])
	buildMu.Lock()
	defer buildMu.Unlock()
	if s, ok := built[entry]; ok {
		built[key] = s
		return s, nil
	}
	bin := filepath.Join(entry, "driver")
	if !binstore.Verified(bin) {
		ii := filepath.Join(scratch, "driver.ii")
		if err := os.WriteFile(ii, []byte(text), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, cc, append(compile, "-o", filepath.Join(scratch, "driver"), ii)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kernelsim: %s does not compile the series' C++ as the device pass for %s: %v\n%s", filepath.Base(cc), arch.SM(), err, firstLines(out, 40))
		}
		if err := binstore.Seal(filepath.Join(scratch, "driver")); err != nil {
			return nil, err
		}
		if err := binstore.Publish(scratch, entry, "driver"); err != nil {
			return nil, err
		}
	}
	s = &Sim{bin: bin}
	built[entry], built[key] = s, s
	return s, nil
}

type cxxFile struct {
	name string
	data []byte
}

// cxxFiles are the embedded driver and stubs, in name order.
func cxxFiles() []cxxFile {
	files, _ := cxx.ReadDir("cxx")
	var out []cxxFile
	for _, f := range files {
		b, _ := cxx.ReadFile("cxx/" + f.Name())
		out = append(out, cxxFile{f.Name(), b})
	}
	return out
}

// compileDriver compiles the driver for header in a scratch directory
// beside entry and renames it to entry whole.
func compileDriver(ctx context.Context, cc string, flags []string, header, entry string) error {
	dir, err := writeSources(filepath.Dir(entry), header)
	if dir != "" {
		defer func() { _ = os.RemoveAll(dir) }() // gone once renamed
	}
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "driver")
	cmd := exec.CommandContext(ctx, cc, append(flags, "-iquote", dir, "-I", dir, "-o", bin, filepath.Join(dir, "driver.cc"))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kernelsim: %s does not compile the series' C++ for the host: %v\n%s", filepath.Base(cc), err, firstLines(out, 40))
	}
	if err := binstore.Seal(bin); err != nil {
		return err
	}
	return binstore.Publish(dir, entry, "driver")
}

// BlocksHeader puts the series' added blocks on upstream.h, in a
// CustomAllreduce with upstream's constructor signature and src.Dispatch.
func BlocksHeader(src Source) string {
	return `#pragma once
#include "upstream.h"
namespace sglang {
` + src.Kernels + `
class CustomAllreduce {
 public:
  int rank_;
  int world_size_;
  bool full_nvlink_;
` + src.Members + `
  RankSignals sg_;
  Signal* self_sg_;
  CustomAllreduce(Signal** signals, void*, size_t, int rank, int world_size, bool full_nvlink = true)
      : rank_(rank), world_size_(world_size), full_nvlink_(full_nvlink), self_sg_(signals[rank]) {
    for (int i = 0; i < world_size_; i++) sg_.signals[i] = signals[i];
#ifndef USE_MUSA
    if (!full_nvlink_) pcie_init();
#endif
  }
` + src.Methods + src.Dispatch + `
};
}  // namespace sglang
`
}

// Step is one step of a schedule: Algo for sizes up to MaxBytes (nil: every
// larger size).
type Step struct {
	Algo     string
	MaxBytes *uint64
}

// Parsed is what CustomAllreduce read at init on a PCIe-only group.
type Parsed struct {
	Schedule []Step
	Auto     bool
	Islands  [][]int
	// Scratch is the bytes of scratch it found after its Signal block.
	Scratch uint64
	// Algos is pcie_algo_for at each size asked, or "error: ..." where it
	// threw.
	Algos []string
	// Error is what the constructor threw (Kind: invalid_argument or
	// runtime_error), with Schedule and the rest empty.
	Error, Kind string
	// Layout is the sizes of Signal, RankSignals and PcieIslands as this
	// build has them ("Signal=N RankSignals=N PcieIslands=N"); IslandsHex
	// the bytes of the constructor's pcie_islands_, and ParsedHex those of
	// pcie_parse_islands(ws) (the islands Reduce hands the kernels), in
	// hex, or "error: ..." where it threw. Two builds of one tree (the
	// host pass and a device pass) must agree on them.
	Layout, IslandsHex, ParsedHex string
}

// Parse constructs CustomAllreduce for rank 0 of a PCIe-only group of world
// size ws with capBytes of scratch under env (and nothing else of the
// process's environment), and asks pcie_algo_for about each of sizes.
func (s *Sim) Parse(ctx context.Context, ws int, capBytes uint64, env map[string]string, sizes ...uint64) (Parsed, error) {
	args := []string{"parse", strconv.Itoa(ws), strconv.FormatUint(capBytes, 10)}
	for _, n := range sizes {
		args = append(args, strconv.FormatUint(n, 10))
	}
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	out, err := s.run(ctx, kv, args...)
	if err != nil {
		return Parsed{}, err
	}
	var raw struct {
		Schedule [][]json.RawMessage `json:"schedule"`
		Auto     bool                `json:"auto"`
		Islands  [][]int             `json:"islands"`
		Scratch  uint64              `json:"scratch"`
		Algos    []json.RawMessage   `json:"algos"`
		Error    string              `json:"error"`
		Kind     string              `json:"kind"`
		Layout   string              `json:"layout"`
		Islands2 string              `json:"islands_hex"`
		Parsed   string              `json:"parsed_hex"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return Parsed{}, fmt.Errorf("kernelsim parse: %v: %s", err, out)
	}
	p := Parsed{Auto: raw.Auto, Islands: raw.Islands, Scratch: raw.Scratch, Error: raw.Error, Kind: raw.Kind,
		Layout: raw.Layout, IslandsHex: raw.Islands2, ParsedHex: raw.Parsed}
	for _, st := range raw.Schedule {
		var step Step
		if len(st) != 2 || json.Unmarshal(st[0], &step.Algo) != nil || json.Unmarshal(st[1], &step.MaxBytes) != nil {
			return Parsed{}, fmt.Errorf("kernelsim parse: bad step in %s", out)
		}
		p.Schedule = append(p.Schedule, step)
	}
	for _, a := range raw.Algos {
		var name string
		if json.Unmarshal(a, &name) == nil {
			p.Algos = append(p.Algos, name)
			continue
		}
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(a, &e); err != nil {
			return Parsed{}, fmt.Errorf("kernelsim parse: %v: %s", err, out)
		}
		p.Algos = append(p.Algos, "error: "+e.Error)
	}
	return p, nil
}

// Case is one run of Reduce.
type Case struct {
	DType   string // float32, float16 or bfloat16
	WS      int    // world size: 2, 4, 6 or 8
	Algo    string // push1, push2, island, or mixed (one drawn per call)
	Islands string // SGLANG_PCIE_CUSTOM_AR_ISLANDS, or "" for one island
	Threads int    // threads per block (at least WS)
	Seed    uint32
	Calls   int
	// Packs are the sizes of the calls, in packed elements (16 bytes), call
	// i taking Packs[i % len(Packs)]; nil draws them from Seed.
	Packs []int
	// Timeout is how long the ranks may take before the run says they hang;
	// 0 means two minutes.
	Timeout time.Duration
}

// Result is Reduce's verdict: OK, or the first wrong element.
type Result struct {
	OK     bool    `json:"ok"`
	Calls  int     `json:"calls"`
	Call   int     `json:"call"`
	Algo   string  `json:"algo"`
	Packs  int     `json:"packs"`
	Blocks int     `json:"blocks"`
	Rank   int     `json:"rank"`
	Index  int     `json:"index"`
	Got    float64 `json:"got"`
	Want   float64 `json:"want"`
	Rank0  float64 `json:"rank0"`
	Error  string  `json:"error"`
}

func (r Result) String() string {
	switch {
	case r.OK:
		return fmt.Sprintf("ok (%d calls)", r.Calls)
	case r.Error != "":
		return r.Error
	}
	return fmt.Sprintf("call %d (%s, %d packed elements, %d blocks): rank %d element %d is %g, want %g (rank 0 has %g)",
		r.Call, r.Algo, r.Packs, r.Blocks, r.Rank, r.Index, r.Got, r.Want, r.Rank0)
}

// Reduce runs c's allreduces on c.WS emulated ranks and checks every sum.
func (s *Sim) Reduce(ctx context.Context, c Case) (Result, error) {
	islands := c.Islands
	if islands == "" {
		islands = "-"
	}
	args := []string{"reduce", c.DType, strconv.Itoa(c.WS), c.Algo, islands,
		strconv.Itoa(c.Threads), strconv.FormatUint(uint64(c.Seed), 10), strconv.Itoa(c.Calls)}
	if len(c.Packs) > 0 || c.Timeout > 0 {
		packs := "-"
		if len(c.Packs) > 0 {
			var p []string
			for _, n := range c.Packs {
				p = append(p, strconv.Itoa(n))
			}
			packs = strings.Join(p, ",")
		}
		secs := 120
		if c.Timeout > 0 {
			secs = max(1, int(c.Timeout/time.Second))
		}
		args = append(args, packs, strconv.Itoa(secs))
	}
	out, err := s.run(ctx, nil, args...)
	var r Result
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		if err != nil {
			return Result{}, err
		}
		return Result{}, fmt.Errorf("kernelsim reduce: %v: %s", jerr, out)
	}
	return r, nil
}

func (s *Sim) run(ctx context.Context, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append([]string{}, env...) // only env: never the caller's environment
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && len(bytes.TrimSpace(out)) == 0 {
		return nil, fmt.Errorf("kernelsim %s: %v: %s", args[0], err, firstLines(stderr.Bytes(), 10))
	}
	return bytes.TrimSpace(out), err
}

func firstLines(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}
