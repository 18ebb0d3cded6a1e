package kernelsim

import (
	"fmt"
	"strconv"
	"strings"
)

// The device pass of the kernels (Source.Arch) is the C++ nvcc compiles
// for the GPU: __CUDA_ARCH__ defined, and upstream's flag stores and loads
// written as inline PTX, which a host compiler cannot run. kernelsim
// preprocesses the driver as that pass, then replaces each asm statement
// outside the system headers with a call that does what the PTX does on
// the host (cxx/ptx.h), and refuses any asm statement it does not know:
// what the GPU would run there cannot be emulated, so a series whose
// kernels hold one is not judged as if it were not there.

// ptxKind is what a known PTX template does.
type ptxKind int

const (
	ptxStore ptxKind = iota // st.* [%1], %0: operand 0 an "r" input, 1 an "l" address
	ptxLoad                 // ld.* %0, [%1]: operand 0 an "=r" output, 1 an "l" address
	ptxFence                // "": no operand; a compiler barrier
)

// ptxOrder are cxx/ptx.h's orderings.
const (
	ptxRelaxed      = 0 // st.volatile / ld.volatile
	ptxRelease      = 1 // st.release.sys
	ptxAcquire      = 2 // ld.acquire.sys
	ptxFenceRelaxed = 3 // membar.sys; st.volatile
	ptxRelaxedFence = 4 // ld.volatile; membar.gl
)

type ptxOp struct {
	kind  ptxKind
	order int
}

// knownPTX are the PTX templates of upstream's custom_all_reduce.cuh
// (st_flag_release, ld_flag_acquire, st_flag_volatile, ld_flag_volatile,
// for __CUDA_ARCH__ at least 700 and below), whitespace collapsed, and the
// empty template of a compiler barrier.
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3 (st_flag_release, ld_flag_acquire, st_flag_volatile, ld_flag_volatile),
// also at 8905cbd42f4a.
// Upstream: python/sglang/kernels/aot/csrc/allreduce/custom_all_reduce.cuh@0bda0b168ad5 (st_flag_release, ld_flag_acquire).
var knownPTX = map[string]ptxOp{
	"st.release.sys.global.u32 [%1], %0;":          {ptxStore, ptxRelease},
	"membar.sys; st.volatile.global.u32 [%1], %0;": {ptxStore, ptxFenceRelaxed},
	"st.volatile.global.u32 [%1], %0;":             {ptxStore, ptxRelaxed},
	"ld.acquire.sys.global.u32 %0, [%1];":          {ptxLoad, ptxAcquire},
	"ld.volatile.global.u32 %0, [%1]; membar.gl;":  {ptxLoad, ptxRelaxedFence},
	"ld.volatile.global.u32 %0, [%1];":             {ptxLoad, ptxRelaxed},
	"":                                             {ptxFence, 0},
}

// asmOperand is one operand of an asm statement: its constraint and the
// C++ expression in its parentheses, as written.
type asmOperand struct {
	constraint, expr string
}

// asmStmt is a parsed asm statement.
type asmStmt struct {
	template        string
	outputs, inputs []asmOperand
	clobbers        []string
	gotoLabels      bool
}

// UnknownAsmError is an asm statement of the device pass that kernelsim
// cannot emulate. File and Line are where the preprocessor says it is.
type UnknownAsmError struct {
	File     string
	Line     int
	Template string
	Why      string
}

func (e *UnknownAsmError) Error() string {
	return fmt.Sprintf("%s:%d: inline assembly %q in the device pass: %s; kernelsim runs only upstream's PTX flag loads and stores (%s), so what the GPU would do here is not known",
		e.File, e.Line, e.Template, e.Why, "st.release.sys, ld.acquire.sys, st.volatile, ld.volatile, with or without membar")
}

// emulatePTX rewrites the preprocessed C++ ii (with its linemarkers): each
// asm statement outside the system headers becomes a call into cxx/ptx.h,
// its newlines kept so that later lines keep their numbers. It returns an
// *UnknownAsmError for the first it does not know.
func emulatePTX(ii string) (string, error) {
	var out strings.Builder
	file, line, system := "", 1, false
	atLineStart := true
	i := 0
	for i < len(ii) {
		c := ii[i]
		if atLineStart {
			j := i
			for j < len(ii) && (ii[j] == ' ' || ii[j] == '\t') {
				j++
			}
			if j < len(ii) && ii[j] == '#' {
				end := strings.IndexByte(ii[j:], '\n')
				if end < 0 {
					end = len(ii) - j
				}
				if f, n, sys, ok := linemarker(ii[j : j+end]); ok {
					file, line, system = f, n-1, sys
				}
				out.WriteString(ii[i : j+end])
				i = j + end
				atLineStart = false
				continue
			}
		}
		atLineStart = false
		switch {
		case c == '\n':
			line++
			atLineStart = true
			out.WriteByte(c)
			i++
		case c == '"' || c == '\'':
			n := literalLen(ii[i:])
			line += strings.Count(ii[i:i+n], "\n")
			out.WriteString(ii[i : i+n])
			i += n
		case isIdentStart(c):
			j := i + 1
			for j < len(ii) && isIdent(ii[j]) {
				j++
			}
			word := ii[i:j]
			if (word == "R" || word == "u8R" || word == "uR" || word == "UR" || word == "LR") && j < len(ii) && ii[j] == '"' {
				n := rawLen(ii[j:])
				line += strings.Count(ii[j:j+n], "\n")
				out.WriteString(ii[i : j+n])
				i = j + n
				continue
			}
			if !system && (word == "asm" || word == "__asm" || word == "__asm__") {
				st, n, err := parseAsm(ii[j:])
				if err != nil {
					return "", &UnknownAsmError{File: file, Line: line, Template: "", Why: err.Error()}
				}
				repl, err := st.emulation()
				if err != nil {
					return "", &UnknownAsmError{File: file, Line: line, Template: st.template, Why: err.Error()}
				}
				span := ii[i : j+n]
				nl := strings.Count(span, "\n")
				out.WriteString(repl)
				out.WriteString(strings.Repeat("\n", nl))
				line += nl
				i = j + n
				continue
			}
			out.WriteString(word)
			i = j
		default:
			out.WriteByte(c)
			i++
		}
	}
	return out.String(), nil
}

// linemarker reads the preprocessor's `# 12 "file" 1 3`: the next line's
// number, its file, and whether it is a system header (flag 3).
func linemarker(s string) (file string, line int, system, ok bool) {
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(s), "#"))
	if len(f) > 0 && f[0] == "line" {
		f = f[1:]
	}
	if len(f) < 2 {
		return "", 0, false, false
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || !strings.HasPrefix(f[1], `"`) {
		return "", 0, false, false
	}
	name, err := strconv.Unquote(f[1])
	if err != nil {
		name = strings.Trim(f[1], `"`)
	}
	for _, flag := range f[2:] {
		if flag == "3" {
			system = true
		}
	}
	return name, n, system, true
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdent(c byte) bool      { return isIdentStart(c) || c >= '0' && c <= '9' }

// literalLen is the length of the string or character literal s starts
// with (its quote first), escapes honoured; the rest of s when unclosed.
func literalLen(s string) int {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			return i + 1
		case '\n':
			return i
		}
	}
	return len(s)
}

// rawLen is the length of the raw string literal body s starts with
// (`"delim( ... )delim"`).
func rawLen(s string) int {
	open := strings.IndexByte(s, '(')
	if open < 0 {
		return 1
	}
	end := strings.Index(s[open:], ")"+s[1:open]+`"`)
	if end < 0 {
		return len(s)
	}
	return open + end + open + 1
}

// parseAsm parses what follows `asm` in s: qualifiers, then the
// parenthesised template, operands and clobbers. It returns the statement
// and how many bytes of s it took (through the closing parenthesis).
func parseAsm(s string) (asmStmt, int, error) {
	var st asmStmt
	i := skipSpace(s, 0)
	for {
		j := i
		for j < len(s) && isIdent(s[j]) {
			j++
		}
		switch s[i:j] {
		case "volatile", "__volatile__", "__volatile", "inline", "__inline", "__inline__":
			i = skipSpace(s, j)
			continue
		case "goto":
			st.gotoLabels = true
			i = skipSpace(s, j)
			continue
		}
		break
	}
	if i >= len(s) || s[i] != '(' {
		return st, 0, fmt.Errorf("an asm that is not a statement of the form asm(...)")
	}
	i = skipSpace(s, i+1)
	tmpl, i, err := stringSeq(s, i)
	if err != nil {
		return st, 0, err
	}
	st.template = tmpl
	section := 0
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			return st, 0, fmt.Errorf("an unclosed asm statement")
		}
		switch {
		case s[i] == ')':
			return st, i + 1, nil
		case s[i] == ':':
			section++
			i++
			continue
		case s[i] == ',':
			i++
			continue
		}
		switch section {
		case 1, 2:
			if s[i] == '[' {
				end := strings.IndexByte(s[i:], ']')
				if end < 0 {
					return st, 0, fmt.Errorf("an unclosed operand name")
				}
				i = skipSpace(s, i+end+1)
			}
			cons, j, err := stringSeq(s, i)
			if err != nil {
				return st, 0, err
			}
			j = skipSpace(s, j)
			if j >= len(s) || s[j] != '(' {
				return st, 0, fmt.Errorf("operand %q without its (expression)", cons)
			}
			end, err := matchParen(s, j)
			if err != nil {
				return st, 0, err
			}
			op := asmOperand{constraint: cons, expr: s[j+1 : end]}
			if section == 1 {
				st.outputs = append(st.outputs, op)
			} else {
				st.inputs = append(st.inputs, op)
			}
			i = end + 1
		case 3:
			cl, j, err := stringSeq(s, i)
			if err != nil {
				return st, 0, err
			}
			st.clobbers = append(st.clobbers, cl)
			i = j
		default:
			return st, 0, fmt.Errorf("asm goto labels, or text where operands belong")
		}
	}
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// stringSeq reads adjacent string literals from s[i:] (at least one) and
// returns their concatenated contents, escapes decoded.
func stringSeq(s string, i int) (string, int, error) {
	var b strings.Builder
	n := 0
	for i < len(s) && s[i] == '"' {
		l := literalLen(s[i:])
		v, err := strconv.Unquote(s[i : i+l])
		if err != nil {
			return "", 0, fmt.Errorf("a string literal kernelsim cannot read: %s", s[i:i+l])
		}
		b.WriteString(v)
		n++
		i = skipSpace(s, i+l)
	}
	if n == 0 {
		return "", 0, fmt.Errorf("a template or constraint that is not a string literal")
	}
	return b.String(), i, nil
}

// matchParen returns the index of the parenthesis that closes s[open].
func matchParen(s string, open int) (int, error) {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i, nil
			}
		case '"', '\'':
			i += literalLen(s[i:]) - 1
		}
	}
	return 0, fmt.Errorf("an unclosed parenthesis in an asm operand")
}

// emulation is the C++ expression that does on the host what st does on
// the GPU, or why there is none.
func (st asmStmt) emulation() (string, error) {
	if st.gotoLabels {
		return "", fmt.Errorf("asm goto")
	}
	op, ok := knownPTX[strings.Join(strings.Fields(st.template), " ")]
	if !ok {
		return "", fmt.Errorf("not one of upstream's PTX templates")
	}
	for _, c := range st.clobbers {
		if c != "memory" {
			return "", fmt.Errorf("clobbers %q", c)
		}
	}
	cons := func(ops []asmOperand) string {
		var c []string
		for _, o := range ops {
			c = append(c, strings.ReplaceAll(o.constraint, " ", ""))
		}
		return strings.Join(c, ",")
	}
	switch op.kind {
	case ptxStore:
		if len(st.outputs) != 0 || cons(st.inputs) != "r,l" {
			return "", fmt.Errorf("a store with operands (%s : %s), not upstream's ( : \"r\"(flag), \"l\"(addr))", cons(st.outputs), cons(st.inputs))
		}
		return fmt.Sprintf("kernelsim_ptx_store((void*)(%s), (%s), %d)", st.inputs[1].expr, st.inputs[0].expr, op.order), nil
	case ptxLoad:
		if cons(st.outputs) != "=r" || cons(st.inputs) != "l" {
			return "", fmt.Errorf("a load with operands (%s : %s), not upstream's (\"=r\"(flag) : \"l\"(addr))", cons(st.outputs), cons(st.inputs))
		}
		return fmt.Sprintf("kernelsim_ptx_load((const void*)(%s), &(%s), %d)", st.inputs[0].expr, st.outputs[0].expr, op.order), nil
	}
	if len(st.outputs)+len(st.inputs) != 0 {
		return "", fmt.Errorf("an empty template with operands")
	}
	return "__atomic_signal_fence(__ATOMIC_SEQ_CST)", nil
}
