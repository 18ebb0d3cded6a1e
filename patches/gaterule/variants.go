package gaterule

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A build variant is a build the real one may be that the judge's one
// compile is not: another host compiler, another CUDA toolkit, sgl-kernel's
// build options. The judge compiles one program; where the tree's files
// preprocess otherwise under a variant, some real build compiles another
// dispatch than the one judged, so the tree is refused wherever the gates
// admit a call (cxxJudge.check). This is judged by effect: each variant's
// preprocessor output of the tree's own lines is compared with the
// judge's, so a test of the compiler spelled through a macro, a token
// paste or a feature test is seen as what it does.
type buildVariant struct {
	Name  string   // what the variant is, for the refusal
	Flags []string // the macro changes to the judge's flags (cxxFlags)
	// Unreadable: the variant makes macros unreadable in #if, so only an
	// error in a tree file counts (one in a system header is expected).
	Unreadable bool
}

// buildVariants are the variants the judge compares. The definitions of
// sgl-kernel's options are those its CMake adds by option (BF16 and FP8
// on by default), by CUDA version (NVFP4 from 12.8) and for its targets,
// and the C++ ABI torch may ask for; the toolkit is CUDA 13.0.
// Upstream: sgl-kernel/CMakeLists.txt@84118acf50b3 (SGL_KERNEL_ENABLE_BF16, SGL_KERNEL_ENABLE_FP8, ENABLE_NVFP4, target_compile_definitions)
// Upstream: python/sglang/kernels/aot/CMakeLists.txt@0bda0b168ad5 (SGL_KERNEL_ENABLE_BF16, SGL_KERNEL_ENABLE_FP8, ENABLE_NVFP4, target_compile_definitions)
var buildVariants = []buildVariant{
	{"another host compiler (g++ under nvcc: no __clang__ or clang's version macros, __GNUC__ 13, clang's feature tests __has_builtin, __has_feature, __has_attribute and the rest answering 0)", []string{
		"-U__clang__", "-U__clang_major__", "-U__clang_minor__", "-U__clang_patchlevel__", "-U__clang_version__", "-U__llvm__", "-U__CUDA__",
		"-U__GNUC__", "-D__GNUC__=13", "-U__GNUC_MINOR__", "-D__GNUC_MINOR__=3", "-U__GNUC_PATCHLEVEL__", "-D__GNUC_PATCHLEVEL__=0",
		"-U__VERSION__", `-D__VERSION__="13.3.0"`, "-D__GNUG__=13", "-U__GXX_ABI_VERSION", "-D__GXX_ABI_VERSION=1018",
		"-D__has_builtin(x)=0", "-D__has_feature(x)=0", "-D__has_extension(x)=0", "-D__has_attribute(x)=0",
		"-D__has_cpp_attribute(x)=0", "-D__has_declspec_attribute(x)=0", "-D__is_identifier(x)=1", "-D__NVCC_DIAG_PRAGMA_SUPPORT__",
	}, false},
	{"another CUDA toolkit (CUDA 13.0: __CUDACC_VER_MAJOR__ 13, CUDART_VERSION and CUDA_VERSION 13000, nvcc's __CUDA_ARCH_LIST__, and the headers a toolkit has, each __has_include true)", []string{
		"-U__CUDACC_VER_MAJOR__", "-D__CUDACC_VER_MAJOR__=13", "-U__CUDACC_VER_MINOR__", "-D__CUDACC_VER_MINOR__=0",
		"-U__CUDACC_VER_BUILD__", "-D__CUDACC_VER_BUILD__=88", "-DCUDART_VERSION=13000", "-DCUDA_VERSION=13000", "-D__CUDA_API_VERSION=13000",
		"-D__CUDA_ARCH_LIST__=800,890,900,1000,1030,1200",
	}, false},
	{"another time of the build (another __DATE__, __TIME__ and __TIMESTAMP__)", []string{
		`-D__DATE__="Jan  1 2031"`, `-D__TIME__="00:00:00"`, `-D__TIMESTAMP__="Wed Jan  1 00:00:00 2031"`,
	}, false},
	{"the compiler and toolkit versions the judge does not try (g++ 9 to 14, CUDA 12.4 to 13.x: each version macro made unreadable in #if, so that a test of its value stands out)", []string{
		"-U__GNUC__", "-D__GNUC__=(", "-U__GNUC_MINOR__", "-D__GNUC_MINOR__=(", "-U__GNUC_PATCHLEVEL__", "-D__GNUC_PATCHLEVEL__=(", "-D__GNUG__=(",
		"-U__clang_major__", "-D__clang_major__=(", "-U__clang_minor__", "-D__clang_minor__=(", "-U__clang_patchlevel__", "-D__clang_patchlevel__=(",
		"-U__CUDACC_VER_MAJOR__", "-D__CUDACC_VER_MAJOR__=(", "-U__CUDACC_VER_MINOR__", "-D__CUDACC_VER_MINOR__=(", "-U__CUDACC_VER_BUILD__", "-D__CUDACC_VER_BUILD__=(",
		"-DCUDART_VERSION=(", "-DCUDA_VERSION=(", "-D__CUDA_API_VERSION=(", "-U__GXX_ABI_VERSION", "-D__GXX_ABI_VERSION=(",
		"-ferror-limit=0", // the system headers err on every test of __GNUC__: all of them, then the tree's
	}, true},
	{"sgl-kernel's build options (FLASHINFER_ENABLE_BF16, FLASHINFER_ENABLE_FP8 and its E4M3 and E5M2, ENABLE_NVFP4=1, FLASHATTENTION_DISABLE_BACKWARD, _DROPOUT and _UNEVEN_K, CUTLASS_ENABLE_GDC_FOR_SM90, CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED, torch's extension definitions and the macros of its headers, the old C++ ABI)", []string{
		"-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8", "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2", "-DENABLE_NVFP4=1",
		"-DFLASHATTENTION_DISABLE_BACKWARD", "-DFLASHATTENTION_DISABLE_DROPOUT", "-DFLASHATTENTION_DISABLE_UNEVEN_K",
		"-DCUTLASS_ENABLE_GDC_FOR_SM90", "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",
		"-DTORCH_EXTENSION_NAME=common_ops", "-DTORCH_API_INCLUDE_EXTENSION_H", "-DPy_LIMITED_API=0x03090000",
		// What torch's headers, which the binding includes before the
		// dispatch, define (c10/macros, ATen's dispatch).
		"-DC10_LIKELY(x)=(x)", "-DC10_UNLIKELY(x)=(x)", "-DC10_MACROS_MACROS_H_", "-DAT_DISPATCH_SWITCH(...)=",
		"-DC10_CUDA_KERNEL_LAUNCH_CHECK()=", "-DTORCH_VERSION_MAJOR=2", "-DTORCH_VERSION_MINOR=9", "-DC10_HOST_DEVICE=",
		"-U_GLIBCXX_USE_CXX11_ABI", "-D_GLIBCXX_USE_CXX11_ABI=0",
	}, false},
}

// hasIncludeRe finds the headers a file asks __has_include about: the
// toolkit variant makes each exist (an empty file), as a toolkit's would.
var hasIncludeRe = regexp.MustCompile(`__has_include(?:_next)?\s*\(\s*[<"]([^>"\n]+)[>"]`)

// variantsFile, beside a compiled judge, holds what compareVariants
// found: empty, or the one line of the first difference.
const variantsFile = "variants.txt"

// compareVariants preprocesses the judge's translation unit (args, as
// compile builds them, with prelude.h included as text) under the judge's
// flags and each build variant's, and returns the first of the tree's
// lines whose text differs, with the variant: "" when none does. A
// variant that the preprocessor refuses in a tree file is a difference
// too; one refused in a file of the judge's or the system's is skipped.
func compareVariants(ctx context.Context, cc string, args []string, work string, src cxxSource) (string, error) {
	base, err := preprocess(ctx, cc, args, nil, work)
	if err != nil {
		return "", fmt.Errorf("preprocessing the gate judge for %s: %v", src.Header, err)
	}
	// The headers the tree asks __has_include about, made to exist for
	// the toolkit variant.
	inc := filepath.Join(work, "toolkit-headers")
	for _, b := range src.Files {
		for _, m := range hasIncludeRe.FindAllSubmatch(b, -1) {
			name := filepath.Clean(string(m[1]))
			if filepath.IsAbs(name) || strings.HasPrefix(name, "..") {
				continue
			}
			f := filepath.Join(inc, name)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				return "", err
			}
		}
	}
	for _, v := range buildVariants {
		flags := slices.Clone(v.Flags)
		if strings.HasPrefix(v.Name, "another CUDA toolkit") {
			flags = append(flags, "-idirafter", inc)
		}
		got, err := preprocess(ctx, cc, args, flags, work)
		if err != nil {
			if at := treeErrorLine(err.Error()); at != "" {
				verb := "does not preprocess under"
				if v.Unreadable {
					verb = "tests the value of a macro made unreadable under"
				}
				return fmt.Sprintf("%s %s %s", at, verb, v.Name), nil
			}
			continue
		}
		if v.Unreadable {
			continue
		}
		if at := firstDifference(base, got); at != "" {
			return fmt.Sprintf("%s preprocesses otherwise under %s", at, v.Name), nil
		}
	}
	return "", nil
}

// preprocess runs cc -E on args with extra after the judge's flags and
// returns the tree's lines it printed (treeLines).
func preprocess(ctx context.Context, cc string, args, extra []string, work string) (map[string][]srcLine, error) {
	n := len(cxxFlags())
	full := append(append(slices.Clone(args[:n]), extra...), args[n:]...)
	full = append(full, "-E", "-o", "-")
	cmd := exec.CommandContext(ctx, cc, full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// Every message, tree paths made relative: treeErrorLine looks
		// for the first in a tree file.
		return nil, fmt.Errorf("%v: %s", err, strings.ReplaceAll(stderr.String(), filepath.Join(work, "tree")+"/", ""))
	}
	return treeLines(out, work), nil
}

var markerRe = regexp.MustCompile(`^# ([0-9]+) "((?:[^"\\]|\\.)*)"`)

// srcLine is one non-blank line of preprocessor output from a tree file.
type srcLine struct {
	Line int
	Text string
}

// treeLines reads cc -E output: each file of the tree's (under
// work/tree/) non-blank lines in the order printed, by tree-relative file.
func treeLines(out []byte, work string) map[string][]srcLine {
	lines := map[string][]srcLine{}
	root := filepath.Join(work, "tree") + "/"
	file, line := "", 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		t := sc.Text()
		if m := markerRe.FindStringSubmatch(t); m != nil {
			line, _ = strconv.Atoi(m[1])
			file = ""
			if rel, ok := strings.CutPrefix(m[2], root); ok {
				file = rel
			}
			continue
		}
		if file != "" && strings.TrimSpace(t) != "" {
			lines[file] = append(lines[file], srcLine{line, strings.TrimSpace(t)})
		}
		line++
	}
	return lines
}

// firstDifference is the first "file:line" (files in order) where the
// text of a and b differs, lines compared in order (so the same code at
// other line numbers, an #ifdef whose sides are alike, is no
// difference), or "".
func firstDifference(a, b map[string][]srcLine) string {
	var files []string
	for f := range a {
		files = append(files, f)
	}
	for f := range b {
		if _, ok := a[f]; !ok {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	for _, f := range files {
		x, y := a[f], b[f]
		for i := 0; i < max(len(x), len(y)); i++ {
			switch {
			case i >= len(x):
				return fmt.Sprintf("%s:%d", f, y[i].Line)
			case i >= len(y) || x[i].Text != y[i].Text:
				return fmt.Sprintf("%s:%d", f, x[i].Line)
			}
		}
	}
	return ""
}

var errLocRe = regexp.MustCompile(`(?m)^([^\s:]+):([0-9]+):[0-9]+: (?:fatal )?error:`)

// treeErrorLine is the tree file and line of the first error in a
// preprocessor's messages that is in a tree file (preprocess made their
// paths relative; the system's and the judge's stay absolute), or "".
func treeErrorLine(msg string) string {
	for _, m := range errLocRe.FindAllStringSubmatch(msg, -1) {
		if !strings.HasPrefix(m[1], "/") && !strings.HasPrefix(m[1], "<") {
			return m[1] + ":" + m[2]
		}
	}
	return ""
}

// comparePaths compiles the translation unit (args, as compile builds
// them) to LLVM IR again with the tree and the driver at other paths of
// the same length, as __FILE__ and __BASE_FILE__ name them
// (-fmacro-prefix-map), and returns the first function whose code differs
// from base's (the IR compile writes), or "": the real build compiles
// the tree from another directory, so a dispatch whose code depends on
// the path would be judged as another program. String constants are
// left out of the comparison (a message that names the file is the same
// code), and so is metadata.
func comparePaths(ctx context.Context, cc string, args []string, work string, base []byte) (string, error) {
	tree := filepath.Join(work, "tree") + "/"
	stubs := filepath.Dir(args[len(args)-1]) + "/"
	n := len(cxxFlags())
	flags := []string{"-fmacro-prefix-map=" + tree + "=" + samePathLength(tree), "-fmacro-prefix-map=" + stubs + "=" + samePathLength(stubs)}
	full := append(append(slices.Clone(args[:n]), flags...), args[n:]...)
	out := filepath.Join(work, "judge-path.ll")
	full = append(full, "-S", "-emit-llvm", "-o", out)
	if msg, err := exec.CommandContext(ctx, cc, full...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling the gate judge from another path: %v: %s", err, errorLines(string(msg), work, 4))
	}
	alt, err := os.ReadFile(out)
	if err != nil {
		return "", err
	}
	a, b := irCode(base), irCode(alt)
	for name, code := range a {
		if b[name] != code {
			return fmt.Sprintf("%s compiles otherwise from another checkout path (its code depends on __FILE__ or __BASE_FILE__)", demangled(name)), nil
		}
	}
	return "", nil
}

// samePathLength is a path as long as p, of one directory of other
// letters ("/qqq.../"): the same string lengths in the code, other
// contents, other components.
func samePathLength(p string) string {
	if len(p) < 3 {
		return p
	}
	return "/" + strings.Repeat("q", len(p)-2) + "/"
}

var irMetaRefRe = regexp.MustCompile(`, ![a-z.]+ ![0-9]+|![0-9]+`)

// irCode is each function's body in ir, metadata references dropped.
func irCode(ir []byte) map[string]string {
	out := map[string]string{}
	name := ""
	var body strings.Builder
	for _, l := range strings.Split(string(ir), "\n") {
		switch {
		case strings.HasPrefix(l, "define "):
			name = ""
			if m := irDefineRe.FindStringSubmatch(l); m != nil {
				name = strings.Trim(m[1], `"`)
			}
			body.Reset()
		case l == "}" && name != "":
			out[name] = body.String()
			name = ""
		case name != "":
			body.WriteString(irMetaRefRe.ReplaceAllString(l, ""))
			body.WriteString("\n")
		}
	}
	return out
}
