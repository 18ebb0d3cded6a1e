package gaterule

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/arpatch/arpatch/internal/binstore"
	"github.com/arpatch/arpatch/internal/sglkernel"
	"github.com/arpatch/arpatch/patches/kernelsim"
)

//go:embed cxx
var cxxFS embed.FS

// ErrNoClang is returned when no clang++ is found: the C++ judge needs
// clang's CUDA mode (Debian's clang package).
var ErrNoClang = errors.New("no clang++ on PATH (or $ARPATCH_CLANG): the C++ side of the gate rule compiles the dispatch with clang's CUDA host pass; install clang (Debian: `apt-get install clang`)")

// Clang returns the compiler the C++ judge runs: $ARPATCH_CLANG, else the
// first of clang++, clang++-19 ... clang++-14 on PATH.
func Clang() (string, error) {
	if c := os.Getenv("ARPATCH_CLANG"); c != "" {
		p, err := exec.LookPath(c)
		if err != nil {
			return "", fmt.Errorf("%w (ARPATCH_CLANG=%s: %v)", ErrNoClang, c, err)
		}
		return p, nil
	}
	for _, c := range []string{"clang++", "clang++-19", "clang++-18", "clang++-17", "clang++-16", "clang++-15", "clang++-14"} {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", ErrNoClang
}

// cxxFlags are the judge's compile flags: clang's CUDA host pass without
// CUDA's headers (arpatch's stubs stand in), the build's own C++ standard
// and definitions (sglkernel.CUDAFlags: -DNDEBUG and the rest), nvcc's
// host-pass macros (kernelsim.Defines: the build's and nvcc's).
//
// --cuda-path=/dev/null keeps clang from finding a CUDA toolkit on the
// host (through ptxas on PATH, or /usr/local/cuda): a toolkit
// it finds sets the CUDA version clang lowers <<<...>>> for, and from
// CUDA 9.2 on that is __cudaPushCallConfiguration, which the stub runtime
// does not declare, so on a GPU host with a toolkit every series would
// be refused. With none found, a launch lowers to cudaConfigureCall
// (cxx/cuda_runtime.h) on every host alike.
func cxxFlags() []string {
	f := []string{"-x", "cuda", "--cuda-host-only", "--cuda-path=/dev/null", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80", "-O1", "-w"}
	for _, d := range sglkernel.CUDAFlags {
		if strings.HasPrefix(d, "-std=") {
			f = append(f, d)
		}
	}
	return append(f, kernelsim.Defines()...)
}

// cxxSource is what the C++ judge compiles: the dispatch header and the
// files of the tree it includes with quotes, tree-relative.
type cxxSource struct {
	Header string
	Files  map[string][]byte
	// Dirs are the include directories of the build (the project's
	// include/ and csrc/), tree-relative.
	Dirs []string
}

var includeRe = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"`)

// gather reads the header and, transitively, every file it names in a
// quoted #include that the tree holds (next to the including file, then
// in dirs), except utils.h, which is the judge's own (it would pull in
// torch). It is over-inclusive on purpose: the compiler decides what is
// used.
func gather(read Reader, header string, dirs []string) (cxxSource, error) {
	src := cxxSource{Header: header, Files: map[string][]byte{}, Dirs: dirs}
	todo := []string{header}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if _, ok := src.Files[p]; ok {
			continue
		}
		b, err := read(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != header {
				continue
			}
			return src, err
		}
		src.Files[p] = b
		for _, m := range includeRe.FindAllSubmatch(b, -1) {
			name := string(m[1])
			if name == "utils.h" {
				continue
			}
			for _, d := range append([]string{path.Dir(p)}, dirs...) {
				q := path.Clean(path.Join(d, name))
				if strings.HasPrefix(q, "../") {
					continue
				}
				if _, err := read(q); err == nil {
					todo = append(todo, q)
					break
				}
			}
		}
	}
	return src, nil
}

// key is the content hash of everything a build reads: the compiler, its
// flags, the judge's own files and the tree's.
func (s cxxSource) key(cc, version string) string {
	h := sha256.New()
	fmt.Fprintf(h, "gate-judge-v5\x00%s\x00%s\x00%s\x00%s\x00", cc, version, strings.Join(cxxFlags(), " "), s.Header)
	for _, v := range buildVariants {
		fmt.Fprintf(h, "%s\x00", strings.Join(v.Flags, " "))
	}
	ents, _ := cxxFS.ReadDir("cxx")
	for _, e := range ents {
		b, _ := cxxFS.ReadFile("cxx/" + e.Name())
		fmt.Fprintf(h, "%s\x00%d\x00%s", e.Name(), len(b), b)
	}
	var paths []string
	for p := range s.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(h, "%s\x00%d\x00%s", p, len(s.Files[p]), s.Files[p])
	}
	fmt.Fprintf(h, "%s", strings.Join(s.Dirs, "\x00"))
	return hex.EncodeToString(h.Sum(nil))
}

// CompileError is a dispatch header the judge's compiler refuses, with
// its first error lines.
type CompileError struct {
	Header string
	Output string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("clang's CUDA host pass does not compile %s with arpatch's stub CUDA headers:\n%s", e.Header, e.Output)
}

var (
	buildMu   sync.Mutex
	builds    = map[string]string{} // key: binary
	versionOf = map[string]string{} // compiler: its --version (kept by exeStamp)
)

// cacheDir is where compiled judges are kept across runs:
// $XDG_CACHE_HOME/arpatch/gate-judge (os.UserCacheDir), else the system
// temp dir.
func cacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "arpatch", "gate-judge")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("arpatch-gate-judge-%d", os.Getuid()))
}

// buildJudge compiles the judge driver with src, or finds it compiled
// (in this process, or in cacheDir under its content key, the sha256 of
// the binary and of its IR checked). It returns ErrNoClang, a *CompileError, or the
// filesystem's error.
func buildJudge(ctx context.Context, src cxxSource) (string, error) {
	cc, err := Clang()
	if err != nil {
		return "", err
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if _, ok := versionOf[cc]; !ok {
		out, err := exeAnswer(cc, "cc", func() (string, error) {
			out, err := exec.CommandContext(ctx, cc, "--version").Output()
			return string(out), err
		})
		if err != nil {
			return "", fmt.Errorf("%s --version: %v", cc, err)
		}
		versionOf[cc] = out
	}
	key := src.key(cc, versionOf[cc])
	if bin, ok := builds[key]; ok {
		if _, err := os.Stat(filepath.Join(filepath.Dir(bin), variantsFile)); err == nil {
			return bin, nil
		}
		delete(builds, key) // removed since (another process's prune): build again
	}
	dir := filepath.Join(cacheDir(), key[:32])
	bin := filepath.Join(dir, "judge")
	if binstore.Verified(bin) && binstore.Verified(filepath.Join(dir, irFile)) && binstore.Verified(filepath.Join(dir, variantsFile)) {
		builds[key] = bin
		return bin, nil
	}
	if err := compile(ctx, cc, src, dir); err != nil {
		return "", err
	}
	builds[key] = bin
	pruneBuilds(dir)
	return bin, nil
}

// keepBuilds is how many compiled judges cacheDir keeps; beyond it the
// least recently built go.
const keepBuilds = 128

// pruneBuilds removes the oldest compiled judges beyond keepBuilds, never
// keep (the one just built) or one this process has built or found (the
// builds it answers from). Its caller holds buildMu.
func pruneBuilds(keep string) {
	ents, err := os.ReadDir(filepath.Dir(keep))
	if err != nil {
		return
	}
	type entry struct {
		path string
		at   time.Time
	}
	var entries []entry
	for _, e := range ents {
		if info, err := e.Info(); err == nil && e.IsDir() && len(e.Name()) == 32 {
			entries = append(entries, entry{filepath.Join(filepath.Dir(keep), e.Name()), info.ModTime()})
		}
	}
	if len(entries) <= keepBuilds {
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].at.Before(entries[j].at) })
	held := map[string]bool{}
	for _, bin := range builds {
		held[filepath.Dir(bin)] = true
	}
	for _, b := range entries[:len(entries)-keepBuilds] {
		if b.path != keep && !held[b.path] {
			_ = os.RemoveAll(b.path) // the cache's oldest entry
		}
	}
}

// compile writes src's files into a scratch directory, compiles them
// with the judge's driver, and moves the binary into dir (atomically: a
// rename).
func compile(ctx context.Context, cc string, src cxxSource, dir string) error {
	stubs, pch, err := prepared(ctx, cc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(dir), ".build-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }() // scratch of this build
	tree := filepath.Join(work, "tree")
	if err := writeFiles(tree, src.Files); err != nil {
		return err
	}
	args := append(cxxFlags(), "-I", stubs)
	for _, d := range append(slices.Clone(src.Dirs), path.Dir(src.Header)) {
		args = append(args, "-I", filepath.Join(tree, filepath.FromSlash(d)))
	}
	// The preprocessor's variants read prelude.h as text: a precompiled
	// header holds the judge's own macros.
	textArgs := append(slices.Clone(args), "-include", "prelude.h", filepath.Join(stubs, driverName))
	args = append(args, pch...)
	args = append(args, filepath.Join(stubs, driverName))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	link := append(slices.Clone(args), "-x", "none", "-o", filepath.Join(work, "judge"), "-rdynamic", "-ldl")
	if out, err := exec.CommandContext(ctx, cc, link...).CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("compiling the gate judge for %s: %w", src.Header, ctx.Err())
		}
		out = bytes.ReplaceAll(out, []byte(stubs+"/"), []byte("judge stubs/"))
		return &CompileError{Header: src.Header, Output: errorLines(string(out), work, 12)}
	}
	// The same translation unit as LLVM IR, kept beside the judge: the
	// integer constants its comparisons and switches test, as the
	// compiler folded them (judgeCuts), and the paths the proof follows
	// (irproof.go).
	// With line tables, so that the path proof names the tree's lines.
	ir := filepath.Join(work, "judge.ll")
	if out, err := exec.CommandContext(ctx, cc, append(args, "-gline-tables-only", "-S", "-emit-llvm", "-o", ir)...).CombinedOutput(); err != nil {
		return fmt.Errorf("compiling the gate judge for %s to LLVM IR: %v: %s", src.Header, err, errorLines(string(out), work, 4))
	}
	text, err := os.ReadFile(ir)
	if err != nil {
		return err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(text); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, irFile), gz.Bytes(), 0o644); err != nil {
		return err
	}
	finding, err := compareVariants(ctx, cc, textArgs, work, src)
	if err != nil {
		return err
	}
	if finding == "" {
		irArgs := append(slices.Clone(args[:len(args)-1]), "-gline-tables-only", args[len(args)-1])
		if finding, err = comparePaths(ctx, cc, irArgs, work, text); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(work, variantsFile), []byte(finding), 0o644); err != nil {
		return err
	}
	return install(work, dir)
}

// driverName is the name cxx/judge.cu is compiled under: the binding's
// (the real translation unit), so that __BASE_FILE__ names the same file.
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cu@84118acf50b3 (all_reduce)
const driverName = "custom_all_reduce.cu"

// irFile, beside a compiled judge, is its translation unit as LLVM IR
// (clang -S -emit-llvm with the judge's flags), gzipped: about 1 MB of
// text, 0.1 MB kept.
const irFile = "judge.ll.gz"

// irCmpRe is an integer comparison of LLVM IR, its two operands; irCaseRe
// a switch's case.
var (
	irCmpRe  = regexp.MustCompile(`= icmp [a-z]+ i(?:8|16|32|64) ([^ ,]+), ([^ ,]+)`)
	irCaseRe = regexp.MustCompile(`^i(?:8|16|32|64) (-?[0-9]+), label `)
)

// irCuts returns the positive integer constants that LLVM IR (clang -S
// -emit-llvm of the judge's translation unit, the dispatch compiled as
// the build compiles it) compares with (icmp) or switches on (a switch's
// cases, one a line): every size the compiled dispatch can tell from its
// neighbours, a computed one (6251 * 16) folded to its value. Sorted,
// each once.
func irCuts(ir []byte) []uint64 {
	var out []uint64
	add := func(lit string) {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil && n > 0 && n <= 1<<40 {
			out = append(out, uint64(n))
		}
	}
	for _, l := range strings.Split(string(ir), "\n") {
		t := strings.TrimSpace(l)
		if m := irCmpRe.FindStringSubmatch(t); m != nil {
			add(m[1])
			add(m[2])
		} else if m := irCaseRe.FindStringSubmatch(t); m != nil {
			add(m[1])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// judgeCuts returns irCuts of the IR kept beside the compiled judge bin.
func judgeCuts(bin string) ([]uint64, error) {
	b, err := judgeIRText(bin)
	if err != nil {
		return nil, err
	}
	return irCuts(b), nil
}

// judgeIRText is the IR kept beside the compiled judge bin (irFile).
func judgeIRText(bin string) ([]byte, error) {
	f, err := os.Open(filepath.Join(filepath.Dir(bin), irFile))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return b, nil
}

var irModules = struct {
	sync.Mutex
	m map[string]*irModule
}{m: map[string]*irModule{}}

// judgeIR is the parsed IR beside bin, parsed once a process.
func judgeIR(bin string) (*irModule, error) {
	irModules.Lock()
	defer irModules.Unlock()
	if m, ok := irModules.m[bin]; ok {
		return m, nil
	}
	b, err := judgeIRText(bin)
	if err != nil {
		return nil, err
	}
	m := parseIR(string(b))
	if len(irModules.m) > 16 {
		clear(irModules.m)
	}
	irModules.m[bin] = m
	return m, nil
}

// treeRel is a compiled file's tree-relative path (the judge writes the
// tree's files under a scratch tree/ directory), "" for another file.
func treeRel(name string) string {
	if _, rel, ok := strings.Cut(name, "/tree/"); ok {
		return rel
	}
	return ""
}

// install moves work's judge, its IR and its variants' finding, each
// with its sha256 beside it, into dir.
func install(work, dir string) error {
	final := filepath.Join(work, "out")
	if err := os.Mkdir(final, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"judge", irFile, variantsFile} {
		if err := os.Rename(filepath.Join(work, f), filepath.Join(final, f)); err != nil {
			return err
		}
		if err := binstore.Seal(filepath.Join(final, f)); err != nil {
			return err
		}
	}
	return binstore.Publish(final, dir, "judge")
}

func writeFiles(root string, files map[string][]byte) error {
	for p, b := range files {
		f := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

var preparedOnce struct {
	sync.Mutex
	stubs string
	pch   []string
}

// prepared returns the judge's stub headers, written once under
// cacheDir (the same directory for every build, so that a precompiled
// header of prelude.h holds), and the flags that include that header:
// -include-pch of one built once, or -include prelude.h where clang
// cannot precompile it.
func prepared(ctx context.Context, cc string) (string, []string, error) {
	preparedOnce.Lock()
	defer preparedOnce.Unlock()
	if preparedOnce.stubs != "" {
		return preparedOnce.stubs, preparedOnce.pch, nil
	}
	files := map[string][]byte{}
	h := sha256.New()
	ents, err := cxxFS.ReadDir("cxx")
	if err != nil {
		return "", nil, err
	}
	for _, e := range ents {
		b, _ := cxxFS.ReadFile("cxx/" + e.Name())
		files[e.Name()] = b
		fmt.Fprintf(h, "%s\x00%d\x00%s", e.Name(), len(b), b)
	}
	files[driverName] = files["judge.cu"]
	fmt.Fprintf(h, "%s\x00%s\x00%s", cc, versionOf[cc], strings.Join(cxxFlags(), " "))
	dir := filepath.Join(cacheDir(), "stubs-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "prelude.h")); err != nil {
		if err := buildStubs(ctx, cc, dir, files); err != nil {
			return "", nil, err
		}
	}
	preparedOnce.stubs, preparedOnce.pch = dir, []string{"-include", "prelude.h"}
	if _, err := os.Stat(filepath.Join(dir, "prelude.pch")); err == nil {
		preparedOnce.pch = []string{"-include-pch", filepath.Join(dir, "prelude.pch")}
	}
	return dir, preparedOnce.pch, nil
}

// buildStubs writes files into dir and precompiles prelude.h there,
// through a scratch directory renamed into place.
func buildStubs(ctx context.Context, cc, dir string, files map[string][]byte) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".stubs-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // gone once renamed
	if err := writeFiles(tmp, files); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "prelude.h")); serr == nil {
			return nil // another process wrote them first (its header, if any, follows by a rename)
		}
		return err
	}
	args := append(cxxFlags(), "-I", dir, "-Xclang", "-emit-pch", "-c", "-o", filepath.Join(dir, "prelude.pch.tmp"), filepath.Join(dir, "prelude.h"))
	if err := exec.CommandContext(ctx, cc, args...).Run(); err == nil {
		return os.Rename(filepath.Join(dir, "prelude.pch.tmp"), filepath.Join(dir, "prelude.pch"))
	}
	return nil // no precompiled header: builds include prelude.h
}

// errorLines keeps the compiler's error lines (and the lines just after
// each), at most max, with the scratch directory work removed from paths:
// the tree's files read as tree paths.
func errorLines(out, work string, max int) string {
	out = strings.ReplaceAll(out, filepath.Join(work, "tree")+"/", "")
	var keep []string
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "error:") {
			keep = append(keep, l)
			if i+1 < len(lines) {
				keep = append(keep, lines[i+1])
			}
		}
		if len(keep) >= max {
			break
		}
	}
	if len(keep) == 0 {
		keep = lines[:min(len(lines), max)]
	}
	return strings.Join(keep, "\n")
}
