package gaterule

// Reading LLVM's textual IR for the path proof (irproof.go).

import (
	"regexp"
	"strconv"
	"strings"
)

type irInst struct {
	Text string // the instruction, continuation lines joined with a space
	Def  string // the value it defines (%5), or ""
	Op   string // its opcode: icmp, load, br, call ...
	Dbg  string // its !dbg metadata (!123), or ""
}

type irBlock struct {
	Name  string // its label (%5)
	Insts []irInst
}

type irFunc struct {
	Name   string
	Blocks []*irBlock
	index  map[string]int
}

func (f *irFunc) block(name string) *irBlock {
	if i, ok := f.index[name]; ok {
		return f.Blocks[i]
	}
	return nil
}

// irModule is a translation unit's functions and metadata, as LLVM's
// textual IR (clang -S -emit-llvm) prints them.
type irModule struct {
	Funcs map[string]*irFunc
	Meta  map[string]string // !N: the node's text
	// Globals are the module's global variables, by name: each one's
	// definition line (its initializer may name functions).
	Globals map[string]string
}

var (
	irDefineRe = regexp.MustCompile(`@("(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)\(`)
	irNumArgRe = regexp.MustCompile(`%([0-9]+)[,)]`)
	irLabelRe  = regexp.MustCompile(`^("(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+):`)
	irDefRe    = regexp.MustCompile(`^(%(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)) = (.*)$`)
	irDbgRe    = regexp.MustCompile(`!dbg (![0-9]+)`)
	irMetaRe   = regexp.MustCompile(`^(![0-9]+) = (.*)$`)
)

// parseIR reads LLVM's textual IR. It knows the lines clang prints:
// define ... { to }, labels, instructions (an invoke's `to label` line and
// a switch's or a landingpad's lines joined to theirs), and metadata.
func parseIR(text string) *irModule {
	m := &irModule{Funcs: map[string]*irFunc{}, Meta: map[string]string{}, Globals: map[string]string{}}
	var fn *irFunc
	var cur *irBlock
	open := false // inside a switch's [ ... ]
	for _, line := range strings.Split(text, "\n") {
		if fn == nil {
			if strings.HasPrefix(line, "define ") {
				fn = newFunc(line)
				cur = fn.Blocks[0]
				m.Funcs[fn.Name] = fn
			} else if mm := irMetaRe.FindStringSubmatch(line); mm != nil {
				m.Meta[mm[1]] = mm[2]
			} else if strings.HasPrefix(line, "@") {
				if mm := irGlobalRe.FindStringSubmatch(line); mm != nil {
					m.Globals[strings.Trim(mm[1], `"`)] = line
				}
			}
			continue
		}
		if line == "}" {
			fn, cur, open = nil, nil, false
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, ";") {
			continue
		}
		if !strings.HasPrefix(line, " ") {
			if mm := irLabelRe.FindStringSubmatch(line); mm != nil {
				name := "%" + mm[1]
				if len(cur.Insts) == 0 && len(fn.Blocks) == 1 {
					// The entry block's own label.
					delete(fn.index, cur.Name)
					cur.Name = name
				} else {
					cur = &irBlock{Name: name}
					fn.Blocks = append(fn.Blocks, cur)
				}
				fn.index[name] = len(fn.Blocks) - 1
			}
			continue
		}
		if n := len(cur.Insts); n > 0 && (open || strings.HasPrefix(t, "to label") || t == "cleanup" ||
			strings.HasPrefix(t, "catch ") || strings.HasPrefix(t, "filter ")) {
			last := &cur.Insts[n-1]
			last.Text += " " + t
			if mm := irDbgRe.FindStringSubmatch(t); mm != nil {
				last.Dbg = mm[1] // a switch's, on its closing line
			}
			if open && strings.HasPrefix(t, "]") {
				open = false
			}
			continue
		}
		in := irInst{Text: t}
		if mm := irDefRe.FindStringSubmatch(t); mm != nil {
			in.Def, in.Text = mm[1], mm[2]
		}
		op := in.Text
		for _, p := range []string{"tail ", "musttail ", "notail "} {
			op = strings.TrimPrefix(op, p)
		}
		in.Op, _, _ = strings.Cut(op, " ")
		if mm := irDbgRe.FindStringSubmatch(t); mm != nil {
			in.Dbg = mm[1]
		}
		if in.Op == "switch" && strings.HasSuffix(t, "[") {
			open = true
		}
		cur.Insts = append(cur.Insts, in)
	}
	return m
}

// newFunc is the function a define line opens, with its entry block,
// which, when it has no label line, is numbered after the unnamed
// arguments.
func newFunc(line string) *irFunc {
	name := ""
	if mm := irDefineRe.FindStringSubmatch(line); mm != nil {
		name = strings.Trim(mm[1], `"`)
	}
	args := line
	if i := strings.Index(line, name); i >= 0 {
		args = line[i:]
	}
	n := len(irNumArgRe.FindAllString(args[:closingParen(args)+1], -1))
	entry := &irBlock{Name: "%" + strconv.Itoa(n)}
	return &irFunc{Name: name, Blocks: []*irBlock{entry}, index: map[string]int{entry.Name: 0}}
}

// closingParen is the index of the parenthesis that closes the first one
// of s, or len(s)-1.
func closingParen(s string) int {
	depth := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return len(s) - 1
}

var (
	irGlobalRe   = regexp.MustCompile(`@("(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)`)
	irIndirectRe = regexp.MustCompile(`%(?:"[^"]*"|[-a-zA-Z$._0-9]+)\(`)
)

// callee is the function a call or invoke names, "" for an indirect one
// (through a pointer) or another instruction.
func (in irInst) callee() string {
	if in.Op != "call" && in.Op != "invoke" {
		return ""
	}
	loc := irGlobalRe.FindStringSubmatchIndex(in.Text)
	if loc == nil || irIndirectRe.MatchString(in.Text[:loc[0]]) {
		return ""
	}
	return strings.Trim(in.Text[loc[2]:loc[3]], `"`)
}

// labels are the blocks a terminator may go to.
func (in irInst) labels() []string {
	var out []string
	for _, f := range strings.Split(in.Text, "label ")[1:] {
		l, _, _ := strings.Cut(f, " ")
		out = append(out, strings.TrimRight(l, ",]"))
	}
	return out
}

func (in irInst) terminator() bool {
	switch in.Op {
	case "br", "switch", "ret", "unreachable", "resume", "invoke", "indirectbr", "callbr", "catchswitch", "catchret", "cleanupret":
		return true
	}
	return false
}

var gepRe = regexp.MustCompile(`^getelementptr (?:inbounds )?(.+)$`)

// gepKey is the member a getelementptr instruction addresses:
// "TYPE|i32 1" for `getelementptr inbounds TYPE, TYPE* %0, i64 0, i32 1`,
// or "" when an index is not a constant.
func gepKey(text string) string {
	mm := gepRe.FindStringSubmatch(text)
	if mm == nil {
		return ""
	}
	parts := strings.Split(mm[1], ", ")
	if len(parts) < 3 {
		return ""
	}
	var idx []string
	for _, p := range parts[2:] {
		if strings.HasPrefix(p, "!") {
			break
		}
		f := strings.Fields(p)
		if len(f) != 2 || !isIntLit(f[1]) {
			return ""
		}
		idx = append(idx, p)
	}
	if len(idx) < 2 {
		return ""
	}
	return parts[0] + "|" + strings.Join(idx[1:], ",")
}

func isIntLit(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// probeKey is the member address the probe function reads, or "" when it
// reads none (the class has no such member).
func (m *irModule) probeKey(probe string) string {
	f := m.Funcs[probe]
	if f == nil {
		return ""
	}
	for _, b := range f.Blocks {
		for _, in := range b.Insts {
			if in.Op == "getelementptr" {
				k := gepKey(in.Text)
				return k
			}
		}
	}
	return ""
}

// gepKeys are the members f's getelementptr instructions address, by the
// value each defines.
func gepKeys(f *irFunc) map[string]string {
	out := map[string]string{}
	for _, b := range f.Blocks {
		for _, in := range b.Insts {
			if in.Op == "getelementptr" && in.Def != "" {
				if k := gepKey(in.Text); k != "" {
					out[in.Def] = k
				}
			}
		}
	}
	return out
}
