package gaterule

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// tok is one C++ token with the 1-based line it starts on and the index
// in the unit's tokens where it stands (for a token of a macro's body,
// where the macro was invoked), which says which macros are defined there.
type tok struct {
	s    string
	line int
	at   int
}

// macro is one #define, active from token index from to index to (the
// #undef, or the end of the file).
type macro struct {
	name     string
	params   []string // nil for an object-like macro
	function bool
	body     []tok
	from, to int
}

// unit is a preprocessed file: the tokens the compiler sees in the host
// pass of a CUDA build (no macro defined outside the file, so
// __CUDA_ARCH__, USE_ROCM and USE_MUSA are undefined) and the macros
// defined on the way.
type unit struct {
	toks   []tok
	macros map[string][]*macro
}

// punctuators, longest first.
var puncts = []string{"<<<", ">>>", "<<=", ">>=", "...", "->", "::", "&&", "||", "==", "!=", "<=", ">=", "<<", ">>", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##"}

// lexLine splits one logical line (continuations already joined, comments
// removed) into tokens.
func lexLine(s string, line int, out []tok) []tok {
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == 0:
			// a line break inside the logical line (see logicalLines)
			line++
			i++
		case isIdent(c) || c >= 0x80:
			j := i
			for j < len(s) && (isIdent(s[j]) || (s[j] >= '0' && s[j] <= '9') || s[j] >= 0x80) {
				j++
			}
			out = append(out, tok{s: s[i:j], line: line})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && (isIdent(s[j]) || (s[j] >= '0' && s[j] <= '9') || s[j] == '.' || s[j] == '\'') {
				j++
			}
			out = append(out, tok{s: s[i:j], line: line})
			i = j
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j < len(s) {
				j++
			}
			out = append(out, tok{s: s[i:min(j, len(s))], line: line})
			i = j
		default:
			p := string(c)
			for _, q := range puncts {
				if strings.HasPrefix(s[i:], q) {
					p = q
					break
				}
			}
			out = append(out, tok{s: p, line: line})
			i += len(p)
		}
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// logicalLines removes comments (keeping string and character literals)
// and joins backslash continuations. Each logical line keeps the number
// of the physical line it starts on; a NUL byte marks each line break it
// joined, so that lexLine can number every token.
func logicalLines(src string) ([]string, []int) {
	var lines []string
	var nums []int
	var cur strings.Builder
	line, start := 1, 1
	inBlock := false
	flush := func() {
		lines = append(lines, cur.String())
		nums = append(nums, start)
		cur.Reset()
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if inBlock {
			if c == '\n' {
				line++
				cur.WriteByte(0)
			}
			if c == '*' && i+1 < len(src) && src[i+1] == '/' {
				inBlock = false
				i++
				cur.WriteByte(' ')
			}
			continue
		}
		switch {
		case c == '\\' && i+1 < len(src) && (src[i+1] == '\n' || (src[i+1] == '\r' && i+2 < len(src) && src[i+2] == '\n')):
			if src[i+1] == '\r' {
				i++
			}
			i++
			line++
			cur.WriteByte(0)
		case c == '\n':
			flush()
			line++
			start = line
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i+1 < len(src) && src[i+1] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			inBlock = true
			i++
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				j = len(src) - 1
			}
			cur.WriteString(src[i : j+1])
			i = j
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		flush()
	}
	return lines, nums
}

// preprocess runs the directives of src as the host pass of a CUDA build
// sees them and returns the remaining tokens and the macros. Conditions
// are evaluated with only the file's own macros defined; an identifier
// that is not a macro is 0, as the C preprocessor has it.
func preprocess(src string) (*unit, error) {
	u := &unit{macros: map[string][]*macro{}}
	type frame struct{ active, taken, parent bool }
	var stack []frame
	active := true
	lines, nums := logicalLines(src)
	for k, l := range lines {
		t := strings.TrimSpace(l)
		if !strings.HasPrefix(t, "#") {
			if active {
				u.toks = lexLine(l, nums[k], u.toks)
			}
			continue
		}
		d := strings.TrimSpace(t[1:])
		word := d
		rest := ""
		if i := strings.IndexAny(d, " \t("); i >= 0 {
			word, rest = d[:i], d[i:]
		}
		switch word {
		case "if", "ifdef", "ifndef":
			cond := false
			if active {
				switch word {
				case "ifdef":
					cond = u.defined(strings.TrimSpace(rest))
				case "ifndef":
					cond = !u.defined(strings.TrimSpace(rest))
				default:
					cond = u.ppTrue(rest, nums[k])
				}
			}
			stack = append(stack, frame{active: active && cond, taken: cond, parent: active})
		case "elif", "else":
			if len(stack) == 0 {
				return nil, fmt.Errorf("line %d: #%s without #if", nums[k], word)
			}
			f := &stack[len(stack)-1]
			cond := word == "else" || (f.parent && !f.taken && u.ppTrue(rest, nums[k]))
			f.active = f.parent && !f.taken && cond
			f.taken = f.taken || f.active
		case "endif":
			if len(stack) == 0 {
				return nil, fmt.Errorf("line %d: #endif without #if", nums[k])
			}
			stack = stack[:len(stack)-1]
		case "define":
			if active {
				u.define(rest, nums[k])
			}
		case "undef":
			if active {
				if ms := u.macros[strings.TrimSpace(rest)]; len(ms) > 0 && ms[len(ms)-1].to < 0 {
					ms[len(ms)-1].to = len(u.toks)
				}
			}
		}
		active = true
		for _, f := range stack {
			active = active && f.active
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("an #if is not closed by #endif")
	}
	for i := range u.toks {
		u.toks[i].at = i
	}
	return u, nil
}

func (u *unit) define(rest string, line int) {
	rest = strings.TrimLeft(rest, " \t")
	i := 0
	for i < len(rest) && (isIdent(rest[i]) || (rest[i] >= '0' && rest[i] <= '9')) {
		i++
	}
	m := &macro{name: rest[:i], from: len(u.toks), to: -1}
	body := rest[i:]
	if strings.HasPrefix(body, "(") {
		end := strings.IndexByte(body, ')')
		if end < 0 {
			return
		}
		m.function = true
		for _, p := range strings.Split(body[1:end], ",") {
			if p = strings.TrimSpace(p); p != "" {
				m.params = append(m.params, p)
			}
		}
		body = body[end+1:]
	}
	m.body = lexLine(body, line, nil)
	if ms := u.macros[m.name]; len(ms) > 0 && ms[len(ms)-1].to < 0 {
		ms[len(ms)-1].to = len(u.toks)
	}
	u.macros[m.name] = append(u.macros[m.name], m)
}

// lookup returns the macro name means at token index at, or nil.
func (u *unit) lookup(name string, at int) *macro {
	for _, m := range u.macros[name] {
		if m.from <= at && (m.to < 0 || at < m.to) {
			return m
		}
	}
	return nil
}

func (u *unit) defined(name string) bool { return u.lookup(name, len(u.toks)) != nil }

// ppTrue evaluates an #if or #elif condition.
func (u *unit) ppTrue(expr string, line int) bool {
	ts := lexLine(expr, line, nil)
	var out []tok
	for i := 0; i < len(ts); i++ {
		if ts[i].s == "defined" {
			name := ""
			if i+1 < len(ts) && ts[i+1].s == "(" && i+3 < len(ts) {
				name = ts[i+2].s
				i += 3
			} else if i+1 < len(ts) {
				name = ts[i+1].s
				i++
			}
			v := "0"
			if u.defined(name) {
				v = "1"
			}
			out = append(out, tok{v, line, 0})
			continue
		}
		out = append(out, ts[i])
	}
	for i := range out {
		out[i].at = len(u.toks)
	}
	out = u.expand(out, 0)
	v := evalExpr(out, func(string) value { return known(0) })
	return v.ok && v.n != 0
}

// expand replaces macro invocations in ts with their bodies, each read
// with the macros defined where it stands (tok.at), recursively, to a
// bounded depth. The tokens of a body stand where the macro was invoked.
// As in C, a macro is not expanded again inside its own expansion.
func (u *unit) expand(ts []tok, depth int) []tok { return u.expandHiding(ts, depth, nil) }

func (u *unit) expandHiding(ts []tok, depth int, hide []string) []tok {
	if depth > 16 {
		return ts
	}
	var out []tok
	for i := 0; i < len(ts); i++ {
		at := ts[i].at
		m := u.lookup(ts[i].s, at)
		if m != nil && slices.Contains(hide, m.name) {
			m = nil
		}
		if m == nil {
			out = append(out, ts[i])
			continue
		}
		if !m.function {
			out = append(out, u.expandHiding(placed(m.body, at), depth+1, append(hide[:len(hide):len(hide)], m.name))...)
			continue
		}
		if i+1 >= len(ts) || ts[i+1].s != "(" {
			out = append(out, ts[i])
			continue
		}
		args, end := splitArgs(ts, i+1)
		if end < 0 {
			out = append(out, ts[i:]...)
			break
		}
		var body []tok
		for _, b := range m.body {
			if k := slices.Index(m.params, b.s); k >= 0 && k < len(args) {
				body = append(body, args[k]...)
				continue
			}
			if b.s == "##" {
				continue
			}
			b.at = at
			body = append(body, b)
		}
		out = append(out, u.expandHiding(body, depth+1, append(hide[:len(hide):len(hide)], m.name))...)
		i = end
	}
	return out
}

// placed returns a copy of a macro's body standing at token index at.
func placed(body []tok, at int) []tok {
	out := append([]tok(nil), body...)
	for i := range out {
		out[i].at = at
	}
	return out
}

// splitArgs reads a parenthesised argument list starting at ts[open] ==
// "(" and returns the arguments and the index of the closing ")", or -1.
func splitArgs(ts []tok, open int) ([][]tok, int) {
	var args [][]tok
	var cur []tok
	depth := 0
	for i := open; i < len(ts); i++ {
		switch ts[i].s {
		case "(", "[", "{":
			depth++
			if depth == 1 {
				continue
			}
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return append(args, cur), i
			}
		case ",":
			if depth == 1 {
				args = append(args, cur)
				cur = nil
				continue
			}
		}
		cur = append(cur, ts[i])
	}
	return nil, -1
}

// value is a three-valued integer: known (ok) or unknown.
type value struct {
	n  int64
	ok bool
}

func known(n int64) value { return value{n, true} }

var unknown = value{}

func b2v(b bool) value {
	if b {
		return known(1)
	}
	return known(0)
}

// evalExpr evaluates a C expression over integers. ident gives an
// identifier's value; calls, member accesses, casts and anything else it
// cannot read are unknown. && and || short-circuit on a known operand, so
// "false && unknown" is false.
func evalExpr(ts []tok, ident func(string) value) value {
	p := &exprParser{ts: ts, ident: ident}
	v := p.ternary()
	if p.i != len(p.ts) {
		return unknown
	}
	return v
}

type exprParser struct {
	ts    []tok
	i     int
	ident func(string) value
}

func (p *exprParser) peek() string {
	if p.i < len(p.ts) {
		return p.ts[p.i].s
	}
	return ""
}

// expect moves past token s, or marks the expression unreadable.
func (p *exprParser) expect(s string) bool {
	if p.peek() != s {
		p.i = len(p.ts) + 1
		return false
	}
	p.i++
	return true
}

func (p *exprParser) ternary() value {
	c := p.binary(0)
	if p.peek() != "?" {
		return c
	}
	p.i++
	a := p.ternary()
	if !p.expect(":") {
		return unknown
	}
	b := p.ternary()
	switch {
	case !c.ok:
		if a.ok && b.ok && a.n == b.n {
			return a
		}
		return unknown
	case c.n != 0:
		return a
	}
	return b
}

var levels = [][]string{
	{"||"}, {"&&"}, {"|"}, {"^"}, {"&"}, {"==", "!="}, {"<", "<=", ">", ">="}, {"<<", ">>"}, {"+", "-"}, {"*", "/", "%"},
}

func (p *exprParser) binary(level int) value {
	if level == len(levels) {
		return p.unary()
	}
	l := p.binary(level + 1)
	for slices.Contains(levels[level], p.peek()) {
		op := p.peek()
		p.i++
		r := p.binary(level + 1)
		l = apply(op, l, r)
	}
	return l
}

func apply(op string, l, r value) value {
	switch op {
	case "||":
		if (l.ok && l.n != 0) || (r.ok && r.n != 0) {
			return known(1)
		}
		if l.ok && r.ok {
			return known(0)
		}
		return unknown
	case "&&":
		if (l.ok && l.n == 0) || (r.ok && r.n == 0) {
			return known(0)
		}
		if l.ok && r.ok {
			return known(1)
		}
		return unknown
	}
	if !l.ok || !r.ok {
		return unknown
	}
	a, b := l.n, r.n
	switch op {
	case "|":
		return known(a | b)
	case "^":
		return known(a ^ b)
	case "&":
		return known(a & b)
	case "==":
		return b2v(a == b)
	case "!=":
		return b2v(a != b)
	case "<":
		return b2v(a < b)
	case "<=":
		return b2v(a <= b)
	case ">":
		return b2v(a > b)
	case ">=":
		return b2v(a >= b)
	case "<<":
		if b < 0 || b > 62 {
			return unknown
		}
		return known(a << b)
	case ">>":
		if b < 0 || b > 62 {
			return unknown
		}
		return known(a >> b)
	case "+":
		return known(a + b)
	case "-":
		return known(a - b)
	case "*":
		return known(a * b)
	case "/", "%":
		if b == 0 {
			return unknown
		}
		if op == "/" {
			return known(a / b)
		}
		return known(a % b)
	}
	return unknown
}

func (p *exprParser) unary() value {
	switch p.peek() {
	case "!":
		p.i++
		v := p.unary()
		if !v.ok {
			return unknown
		}
		return b2v(v.n == 0)
	case "-":
		p.i++
		v := p.unary()
		if !v.ok {
			return unknown
		}
		return known(-v.n)
	case "+":
		p.i++
		return p.unary()
	case "~":
		p.i++
		v := p.unary()
		if !v.ok {
			return unknown
		}
		return known(^v.n)
	}
	return p.postfix()
}

func (p *exprParser) postfix() value {
	v := p.primary()
	for {
		switch p.peek() {
		case "(", "[":
			// A call or an index: its value is not ours to know.
			_, end := splitArgs(p.ts, p.i)
			if end < 0 {
				p.i = len(p.ts) + 1
				return unknown
			}
			p.i = end + 1
			v = unknown
		case ".", "->", "::":
			p.i += 2
			v = unknown
		default:
			return v
		}
	}
}

func (p *exprParser) primary() value {
	t := p.peek()
	switch {
	case t == "(":
		p.i++
		v := p.ternary()
		if !p.expect(")") {
			return unknown
		}
		return v
	case t == "true":
		p.i++
		return known(1)
	case t == "false" || t == "nullptr":
		p.i++
		return known(0)
	case t == "this" && p.i+2 < len(p.ts) && p.ts[p.i+1].s == "->":
		p.i += 2
		return p.primary()
	case t != "" && t[0] >= '0' && t[0] <= '9':
		p.i++
		return parseInt(t)
	case t != "" && (isIdent(t[0]) || t[0] >= 0x80):
		p.i++
		return p.ident(t)
	}
	p.i = len(p.ts) + 1
	return unknown
}

func parseInt(s string) value {
	s = strings.ReplaceAll(s, "'", "")
	s = strings.TrimRight(s, "uUlL")
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return unknown
	}
	return known(n)
}
