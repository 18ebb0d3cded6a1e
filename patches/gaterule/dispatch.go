package gaterule

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/internal/bounds"
)

// stmt is one parsed C++ statement of CustomAllreduce::allreduce.
type stmt struct {
	// kind: "block", "if", "switch", "loop", "case", "default", "label",
	// "break", "continue", "return", "throw", "goto", "try", "expr".
	kind string
	line int
	end  int    // block, switch: the line of its closing brace
	cond []tok  // if, switch: the condition; case: the label's expression
	then *stmt  // if
	els  *stmt  // if, may be nil
	body []stmt // block, switch, loop, try
	toks []tok  // expr, return: the statement's tokens
	// label: case/default as written; loop: for, while or do; for
	// messages.
	label string
}

// kids returns the statements directly below s: its body, then and else.
func (s stmt) kids() []stmt {
	kids := append([]stmt(nil), s.body...)
	if s.then != nil {
		kids = append(kids, *s.then)
	}
	if s.els != nil {
		kids = append(kids, *s.els)
	}
	return kids
}

// parser reads statements from expanded tokens.
type parser struct {
	ts []tok
	i  int
}

func (p *parser) peek() string { return p.at(0) }

func (p *parser) at(k int) string {
	if p.i+k < len(p.ts) {
		return p.ts[p.i+k].s
	}
	return ""
}

func (p *parser) line() int {
	if p.i < len(p.ts) {
		return p.ts[p.i].line
	}
	if len(p.ts) > 0 {
		return p.ts[len(p.ts)-1].line
	}
	return 0
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", p.line(), fmt.Sprintf(format, args...))
}

// group returns the tokens inside the bracket at p.i and moves past it.
func (p *parser) group() ([]tok, error) {
	open := p.peek()
	closer := map[string]string{"(": ")", "{": "}", "[": "]"}[open]
	if closer == "" {
		return nil, p.errorf("expected a bracket, found %q", open)
	}
	depth, start := 0, p.i
	for ; p.i < len(p.ts); p.i++ {
		switch p.ts[p.i].s {
		case "(", "{", "[":
			depth++
		case ")", "}", "]":
			depth--
			if depth == 0 {
				in := p.ts[start+1 : p.i]
				p.i++
				return in, nil
			}
		}
	}
	return nil, p.errorf("%q is not closed", open)
}

// block parses a braced block of statements.
func (p *parser) block() (stmt, error) {
	line := p.line()
	inner, err := p.group()
	if err != nil {
		return stmt{}, err
	}
	body, err := parseStatements(inner)
	return stmt{kind: "block", line: line, end: p.ts[p.i-1].line, body: body}, err
}

// statement parses one statement.
func (p *parser) statement() (stmt, error) {
	// Attributes such as [[likely]] change nothing arpatch judges.
	for p.peek() == "[" && p.at(1) == "[" {
		if _, err := p.group(); err != nil {
			return stmt{}, err
		}
	}
	line := p.line()
	switch t := p.peek(); t {
	case "":
		return stmt{}, p.errorf("unexpected end of allreduce")
	case "{":
		return p.block()
	case ";":
		p.i++
		return stmt{kind: "block", line: line}, nil
	case "if":
		p.i++
		if p.peek() == "constexpr" {
			p.i++
		}
		cond, err := p.group()
		if err != nil {
			return stmt{}, err
		}
		then, err := p.statement()
		if err != nil {
			return stmt{}, err
		}
		s := stmt{kind: "if", line: line, cond: cond, then: &then}
		if p.peek() == "else" {
			p.i++
			els, err := p.statement()
			if err != nil {
				return stmt{}, err
			}
			s.els = &els
		}
		return s, nil
	case "case", "default":
		p.i++
		start := p.i
		for p.i < len(p.ts) && p.ts[p.i].s != ":" {
			p.i++
		}
		if p.i == len(p.ts) {
			return stmt{}, p.errorf("%s label without ':'", t)
		}
		s := stmt{kind: t, line: line, cond: p.ts[start:p.i], label: strings.TrimSpace(t + " " + joinToks(p.ts[start:p.i]))}
		p.i++
		return s, nil
	case "switch":
		p.i++
		cond, err := p.group()
		if err != nil {
			return stmt{}, err
		}
		body, err := p.statement()
		if err != nil {
			return stmt{}, err
		}
		s := stmt{kind: "switch", line: line, cond: cond, end: body.end}
		if body.kind == "block" {
			s.body = body.body
		} else {
			s.body = []stmt{body}
		}
		return s, nil
	case "for", "while":
		p.i++
		if _, err := p.group(); err != nil {
			return stmt{}, err
		}
		body, err := p.statement()
		if err != nil {
			return stmt{}, err
		}
		return stmt{kind: "loop", line: line, body: []stmt{body}, label: t}, nil
	case "do":
		p.i++
		body, err := p.statement()
		if err != nil {
			return stmt{}, err
		}
		for p.i < len(p.ts) && p.ts[p.i].s != ";" {
			p.i++
		}
		p.i++
		return stmt{kind: "loop", line: line, body: []stmt{body}, label: "do"}, nil
	case "try":
		p.i++
		s := stmt{kind: "try", line: line}
		if p.peek() != "{" {
			return stmt{}, p.errorf("`try` without a block")
		}
		b, err := p.block()
		if err != nil {
			return stmt{}, err
		}
		s.body = append(s.body, b)
		for p.peek() == "catch" {
			p.i++
			if _, err := p.group(); err != nil {
				return stmt{}, err
			}
			b, err := p.block()
			if err != nil {
				return stmt{}, err
			}
			s.body = append(s.body, b)
		}
		return s, nil
	}
	if p.at(1) == ":" && isIdentTok(p.peek()) {
		s := stmt{kind: "label", line: line, label: p.peek()}
		p.i += 2
		return s, nil
	}
	start := p.i
	depth := 0
	for ; p.i < len(p.ts); p.i++ {
		switch p.ts[p.i].s {
		case "(", "{", "[":
			depth++
		case ")", "}", "]":
			depth--
		case ";":
			if depth == 0 {
				ts := p.ts[start:p.i]
				p.i++
				kind := "expr"
				switch ts[0].s {
				case "break", "continue", "return", "throw", "goto":
					kind = ts[0].s
				case "co_return":
					kind = "return"
				}
				return stmt{kind: kind, line: line, toks: ts}, nil
			}
		}
	}
	return stmt{}, p.errorf("statement without ';'")
}

func isIdentTok(s string) bool { return s != "" && (isIdent(s[0]) || s[0] >= 0x80) }

func parseStatements(ts []tok) ([]stmt, error) {
	p := &parser{ts: ts}
	var out []stmt
	for p.i < len(p.ts) {
		s, err := p.statement()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func joinToks(ts []tok) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t.s)
	}
	return b.String()
}

func isLaunch(s string) bool {
	switch s {
	case "<<<", "cudaLaunchKernel", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx":
		return true
	}
	return false
}

// launches reports whether a statement's tokens launch a kernel every
// time they run: a triple-chevron launch or a CUDA launch call. It
// returns a reason instead when the statement holds a launch that may not
// run: inside braces (a lambda) or under &&, || or ?:.
func launches(ts []tok) (bool, string) {
	depth, launch, cond := 0, false, false
	for _, t := range ts {
		switch t.s {
		case "{":
			depth++
		case "}":
			depth--
		case "&&", "||", "?":
			cond = true
		}
		if isLaunch(t.s) {
			if depth > 0 {
				return false, "a kernel launch inside braces (a lambda, which may never be called)"
			}
			launch = true
		}
	}
	if launch && cond {
		return false, "a kernel launch under `&&`, `||` or `?:`, which may not run"
	}
	return launch, ""
}

// throws reports whether an expression statement always throws:
// TORCH_CHECK(false, ...) and friends.
func throws(ts []tok) bool {
	if len(ts) >= 3 && (ts[0].s == "TORCH_CHECK" || ts[0].s == "TORCH_CHECK_VALUE" || ts[0].s == "TORCH_CHECK_NOT_IMPLEMENTED") && ts[1].s == "(" {
		args, end := splitArgs(ts, 1)
		if end > 0 && len(args) > 0 {
			v := evalExpr(args[0], func(string) value { return unknown })
			return v.ok && v.n == 0
		}
	}
	return false
}

// macroName is how a macro is spelled by convention; a statement that
// invokes one this file does not define could hide a `return`.
var macroName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*[A-Z0-9]$`)

// outsideMacros are macros from outside the dispatch header that
// upstream's allreduce invokes, known not to leave the function except by
// throwing. Upstream: sgl-kernel/include/utils.h@84118acf50b3
// (CHECK_CUDA_SUCCESS throws std::runtime_error); the TORCH_CHECK and
// C10_CUDA_CHECK families throw c10::Error.
var outsideMacros = map[string]bool{
	"CHECK_CUDA_SUCCESS": true, "TORCH_CHECK": true, "TORCH_CHECK_VALUE": true, "TORCH_CHECK_NOT_IMPLEMENTED": true,
	"TORCH_INTERNAL_ASSERT": true, "C10_CUDA_CHECK": true, "AT_CUDA_CHECK": true, "C10_CUDA_KERNEL_LAUNCH_CHECK": true,
}

// outcome is how one path through allreduce, not yet having launched a
// kernel or thrown, leaves a statement. Paths that launch or throw are
// done and are not followed further.
type outcome struct {
	// kind: "fall" (goes on to the next statement), "break", "continue",
	// "return" (leaves allreduce with nothing launched), "undecided" (a
	// construct arpatch does not follow).
	kind string
	line int
	// via: for a fall, the last exit the path took (a `break` out of the
	// switch, running off its end), for the message.
	via string
	// why: for undecided, what arpatch does not follow.
	why string
	// call: the first call on the path to a function of this file that
	// launches a kernel, which arpatch does not follow.
	call string
}

// machine follows paths for one world size.
type machine struct {
	env     func(string) value
	helpers map[string]bool // functions of the file that hold a launch
}

// run follows every path through stmts from entry that has not yet
// launched or thrown. It returns at most one "fall" outcome, first.
func (m *machine) run(stmts []stmt, entry int, in outcome) []outcome {
	cur := &in
	var out []outcome
	for k := entry; k < len(stmts) && cur != nil; k++ {
		res := m.exec(stmts[k], *cur)
		cur = nil
		for _, o := range res {
			if o.kind == "fall" {
				if cur == nil {
					o := o
					cur = &o
				}
				continue
			}
			out = append(out, o)
		}
	}
	if cur != nil {
		out = append([]outcome{*cur}, out...)
	}
	return out
}

func (m *machine) exec(s stmt, in outcome) []outcome {
	fall := in
	fall.kind = "fall"
	switch s.kind {
	case "block":
		return m.run(s.body, 0, fall)
	case "if":
		v := evalExpr(s.cond, m.env)
		var out []outcome
		if !v.ok || v.n != 0 {
			out = append(out, m.exec(*s.then, fall)...)
		}
		if !v.ok || v.n == 0 {
			if s.els != nil {
				out = append(out, m.exec(*s.els, fall)...)
			} else {
				out = append(out, fall)
			}
		}
		return out
	case "switch":
		return m.execSwitch(s, fall)
	case "loop":
		if holds(s.body, leavesOrLaunches) {
			return []outcome{{kind: "undecided", line: s.line, why: fmt.Sprintf("a `%s` loop at line %d that holds a kernel launch, a `return` or a `goto`; arpatch does not follow loops (a loop may run no times)", s.label, s.line)}}
		}
		// A loop that can neither launch nor leave allreduce goes on
		// (or runs forever, which returns no wrong data).
		return []outcome{fall}
	case "try":
		return []outcome{{kind: "undecided", line: s.line, why: fmt.Sprintf("`try` at line %d; arpatch does not follow exceptions caught inside allreduce", s.line)}}
	case "goto":
		return []outcome{{kind: "undecided", line: s.line, why: fmt.Sprintf("`%s` at line %d; arpatch does not follow jumps (write it as if/else)", joinToks(s.toks), s.line)}}
	case "break", "continue":
		o := in
		o.kind, o.line = s.kind, s.line
		return []outcome{o}
	case "throw":
		return nil
	case "return":
		l, why := launches(s.toks)
		if why != "" {
			return []outcome{{kind: "undecided", line: s.line, why: fmt.Sprintf("%s at line %d", why, s.line)}}
		}
		if l {
			return nil
		}
		o := in
		o.kind, o.line = "return", s.line
		return []outcome{o}
	case "expr":
		if throws(s.toks) {
			return nil
		}
		l, why := launches(s.toks)
		if why != "" {
			return []outcome{{kind: "undecided", line: s.line, why: fmt.Sprintf("%s at line %d", why, s.line)}}
		}
		if l {
			return nil
		}
		if name := s.toks[0].s; macroName.MatchString(name) && !outsideMacros[name] && (len(s.toks) == 1 || s.toks[1].s == "(") {
			return []outcome{{kind: "undecided", line: s.line, why: fmt.Sprintf("`%s` at line %d, a macro this file does not define (it could hide a `return`)", name, s.line)}}
		}
		if fall.call == "" {
			if name := callee(s.toks); m.helpers[name] {
				fall.call = fmt.Sprintf("it calls `%s` at line %d, and arpatch does not follow calls: launch the kernel or throw in allreduce itself", name, s.line)
			}
		}
		return []outcome{fall}
	}
	// case, default and other labels: a path falls through them.
	return []outcome{fall}
}

// execSwitch follows a switch: into the case its condition selects, or,
// when the condition is not known, into every case and the default.
func (m *machine) execSwitch(s stmt, in outcome) []outcome {
	if l, ok := nestedLabel(s.body, false); ok {
		return []outcome{{kind: "undecided", line: l, why: fmt.Sprintf("a case label at line %d nested inside a block of the switch at line %d", l, s.line)}}
	}
	v := evalExpr(s.cond, m.env)
	var entries []int
	def, matched := -1, false
	for k, c := range s.body {
		switch c.kind {
		case "default":
			def = k
		case "case":
			cv := evalExpr(c.cond, m.env)
			switch {
			case v.ok && cv.ok && cv.n == v.n:
				entries, matched = []int{k}, true
			case !matched && (!v.ok || !cv.ok):
				entries = append(entries, k)
			}
		}
	}
	var out []outcome
	if !matched {
		if def >= 0 {
			entries = append(entries, def)
		} else {
			o := in
			if joinToks(s.cond) == "world_size_" && v.ok {
				o.via = fmt.Sprintf("has no case for world size %d and no default, so it does nothing", v.n)
			} else {
				o.via = fmt.Sprintf("passes the switch at line %d by no case", s.line)
			}
			out = append(out, o)
		}
	}
	for _, e := range entries {
		for _, o := range m.run(s.body, e, in) {
			switch o.kind {
			case "fall":
				o.via = fmt.Sprintf("runs off the end of the switch (line %d)", s.end)
			case "break":
				o.kind, o.via = "fall", fmt.Sprintf("reaches `break` at line %d", o.line)
			}
			out = append(out, o)
		}
	}
	// One fall, first, as run returns.
	var falls, rest []outcome
	for _, o := range out {
		if o.kind == "fall" {
			falls = append(falls, o)
		} else {
			rest = append(rest, o)
		}
	}
	if len(falls) > 0 {
		rest = append([]outcome{falls[0]}, rest...)
	}
	return rest
}

// nestedLabel finds a case or default label below the top level of a
// switch body (not counting nested switches): arpatch enters only
// top-level cases.
func nestedLabel(stmts []stmt, nested bool) (int, bool) {
	for _, s := range stmts {
		switch s.kind {
		case "case", "default":
			if nested {
				return s.line, true
			}
		case "switch":
			continue
		}
		if l, ok := nestedLabel(s.kids(), true); ok {
			return l, true
		}
	}
	return 0, false
}

// holds reports whether any statement below stmts is one that is.
func holds(stmts []stmt, is func(stmt) bool) bool {
	for _, s := range stmts {
		if is(s) || holds(s.kids(), is) {
			return true
		}
	}
	return false
}

// leavesOrLaunches reports whether s is a `return` or a `goto`, or its
// tokens hold a launch.
func leavesOrLaunches(s stmt) bool {
	launch := func(t tok) bool { return isLaunch(t.s) }
	return s.kind == "return" || s.kind == "goto" || slices.ContainsFunc(s.toks, launch) || slices.ContainsFunc(s.cond, launch)
}

// callee names the function an expression statement calls first:
// `f(...)`, `this->f(...)`, `obj.f(...)`, `ns::f(...)`.
func callee(ts []tok) string {
	for i := 0; i+1 < len(ts); i++ {
		if ts[i+1].s == "(" && isIdentTok(ts[i].s) {
			return ts[i].s
		}
		if ts[i].s == "(" || ts[i].s == "=" {
			return ""
		}
	}
	return ""
}

// judged is the result of reading one file's CustomAllreduce::allreduce.
type judged struct {
	Line  int       // line where allreduce's body opens
	Cases []*wsCase // one per world size judged
}

// wsCase is what allreduce does at one world size without full NVLink.
type wsCase struct {
	WorldSize int
	// OK: every path launches a kernel or throws.
	OK bool
	// Miss describes the first path that does neither, e.g. "reaches
	// `break` at line 478 without launching a kernel or throwing", or the
	// construct on it that arpatch cannot follow.
	Miss string
}

// WorldSizes are the world sizes above 2 that custom allreduce runs at:
// bounds.WorldSizes without 2, so 4, 6 and 8.
// Upstream: sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@84118acf50b3
// (CustomAllreduce::allreduce: REDUCE_CASE(2), (4), (6), (8)).
var WorldSizes = slices.DeleteFunc(slices.Clone(bounds.WorldSizes), func(ws int) bool { return ws <= 2 })

// body is one definition of allreduce found in the file: its tokens
// between the braces, and the lines of the braces.
type body struct {
	toks       []tok
	open, shut int
}

// findAllreduce returns the bodies of every definition of
// CustomAllreduce::allreduce in the host-pass tokens: a member function
// named allreduce defined inside `class|struct CustomAllreduce { ... }`,
// or one defined out of line as `CustomAllreduce::allreduce(...)`.
func findAllreduce(ts []tok) []body {
	var classes [][2]int // token ranges of CustomAllreduce's class bodies
	for i := 0; i+1 < len(ts); i++ {
		if (ts[i].s == "class" || ts[i].s == "struct") && ts[i+1].s == "CustomAllreduce" {
			j := i + 2
			for j < len(ts) && ts[j].s != "{" && ts[j].s != ";" {
				j++
			}
			if j < len(ts) && ts[j].s == "{" {
				p := &parser{ts: ts, i: j}
				if _, err := p.group(); err == nil {
					classes = append(classes, [2]int{j, p.i})
				}
			}
		}
	}
	inClass := func(i int) bool {
		for _, c := range classes {
			if c[0] < i && i < c[1] {
				return true
			}
		}
		return false
	}
	var out []body
	for i := 0; i+1 < len(ts); i++ {
		if ts[i].s != "allreduce" {
			continue
		}
		qualified := i >= 2 && ts[i-1].s == "::" && ts[i-2].s == "CustomAllreduce"
		if !qualified && !inClass(i) || i > 0 && (ts[i-1].s == "." || ts[i-1].s == "->") {
			continue
		}
		j := i + 1
		if ts[j].s == "<" { // an explicit specialization's arguments
			depth := 0
			for ; j < len(ts); j++ {
				if ts[j].s == "<" {
					depth++
				} else if ts[j].s == ">" {
					depth--
					if depth == 0 {
						j++
						break
					}
				}
			}
		}
		if j >= len(ts) || ts[j].s != "(" {
			continue
		}
		p := &parser{ts: ts, i: j}
		if _, err := p.group(); err != nil {
			continue
		}
		for p.i < len(ts) {
			switch q := ts[p.i].s; q {
			case "const", "noexcept", "override", "final", "volatile", "&", "&&":
				p.i++
				if q == "noexcept" && p.peek() == "(" {
					if _, err := p.group(); err != nil {
						p.i = len(ts) // unclosed: no body follows, the candidate is skipped
					}
				}
				continue
			}
			break
		}
		if p.peek() != "{" {
			continue
		}
		open := ts[p.i].line
		in, err := p.group()
		if err != nil {
			continue
		}
		out = append(out, body{toks: in, open: open, shut: ts[p.i-1].line})
		i = p.i - 1
	}
	return out
}

// helperFuncs names the functions the file defines whose bodies hold a
// kernel launch: a path that calls one and launches nothing itself is
// refused, and the message says arpatch does not follow the call.
func helperFuncs(u *unit) map[string]bool {
	out := map[string]bool{}
	ts := u.toks
	for i := 0; i+1 < len(ts); i++ {
		if !isIdentTok(ts[i].s) || ts[i+1].s != "(" {
			continue
		}
		switch ts[i].s {
		case "if", "for", "while", "switch", "catch", "return", "sizeof", "decltype":
			continue
		}
		p := &parser{ts: ts, i: i + 1}
		if _, err := p.group(); err != nil {
			continue
		}
		for p.peek() == "const" || p.peek() == "noexcept" || p.peek() == "override" {
			p.i++
		}
		if p.peek() != "{" {
			continue
		}
		in, err := p.group()
		if err != nil {
			continue
		}
		for _, t := range u.expand(in, 0) {
			if isLaunch(t.s) {
				out[ts[i].s] = true
				break
			}
		}
	}
	return out
}

// written reports whether allreduce's tokens write name (assign to it,
// increment it, take its address, or declare a local of that name), so
// that its value there is not the member's.
func written(ts []tok, name string) bool {
	for i, t := range ts {
		if t.s != name {
			continue
		}
		if i > 0 && (ts[i-1].s == "&" || ts[i-1].s == "++" || ts[i-1].s == "--" || ts[i-1].s == "[") {
			return true
		}
		if i+1 < len(ts) {
			// `name{...}` and `name(...)` can only declare a local of
			// that name (neither member is callable).
			switch ts[i+1].s {
			case "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "++", "--", "{", "(":
				return true
			}
		}
	}
	return false
}

// judgeDispatch finds every definition of CustomAllreduce::allreduce in
// the file's host-pass tokens and follows every path through its whole
// body, from its entry, for each world size in WorldSizes with
// full_nvlink_ false: the file's macros expanded where they are invoked,
// conditions it cannot decide (a forced algorithm, a byte threshold, an
// environment variable) taken both ways, `switch` statements entered at
// the case their condition selects. A path must reach a kernel launch or
// a throw; one that reaches a `return` or the end of allreduce first
// fails, and one that meets a construct arpatch does not follow (a loop
// holding a launch or a return, a goto, try/catch, a macro the file does
// not define) fails as undecided. It returns an error when the file has
// no such function or it cannot be parsed.
func judgeDispatch(src []byte) (*judged, error) {
	u, err := preprocess(string(src))
	if err != nil {
		return nil, err
	}
	bodies := findAllreduce(u.toks)
	if len(bodies) == 0 {
		return nil, fmt.Errorf("the file has no definition of CustomAllreduce::allreduce, where upstream's picks a kernel")
	}
	consts := constants(u)
	helpers := helperFuncs(u)
	var d *judged
	for _, b := range bodies {
		exp := u.expand(b.toks, 0)
		stmts, err := parseStatements(exp)
		if err != nil {
			return nil, fmt.Errorf("reading allreduce at line %d: %w", b.open, err)
		}
		fixed := map[string]bool{"full_nvlink_": !written(exp, "full_nvlink_"), "world_size_": !written(exp, "world_size_")}
		cur := &judged{Line: b.open}
		for _, ws := range WorldSizes {
			env := func(name string) value {
				switch {
				case name == "full_nvlink_" && fixed[name]:
					return known(0)
				case name == "world_size_" && fixed[name]:
					return known(int64(ws))
				}
				if v, ok := consts[name]; ok {
					return known(v)
				}
				return unknown
			}
			m := &machine{env: env, helpers: helpers}
			c := &wsCase{WorldSize: ws, OK: true}
			cur.Cases = append(cur.Cases, c)
			for _, o := range m.run(stmts, 0, outcome{kind: "fall"}) {
				c.OK = false
				switch o.kind {
				case "undecided":
					c.Miss = "meets " + o.why + "; arpatch cannot tell whether a kernel is launched"
				case "return":
					c.Miss = fmt.Sprintf("reaches `return` at line %d without launching a kernel or throwing", o.line)
				case "fall":
					if o.via != "" {
						c.Miss = o.via + " without launching a kernel or throwing"
					} else {
						c.Miss = fmt.Sprintf("reaches the end of allreduce (line %d) without launching a kernel or throwing", b.shut)
					}
				default:
					c.Miss = fmt.Sprintf("reaches `%s` at line %d outside any switch or loop", o.kind, o.line)
				}
				if o.call != "" && o.kind != "undecided" {
					c.Miss += "; " + o.call
				}
				break
			}
		}
		// Every definition must pass; report the first that does not.
		if d == nil || d.ok() && !cur.ok() {
			d = cur
		}
	}
	return d, nil
}

func (d *judged) ok() bool {
	for _, c := range d.Cases {
		if !c.OK {
			return false
		}
	}
	return true
}

// constants reads integer constants the file defines at namespace or
// class scope: `constexpr T NAME = EXPR;` (static, inline and const
// variants), so that a threshold compared with world_size_ is known.
func constants(u *unit) map[string]int64 {
	out := map[string]int64{}
	ts := u.toks
	for i := 0; i < len(ts); i++ {
		if ts[i].s != "constexpr" {
			continue
		}
		j := i + 1
		for j < len(ts) && ts[j].s != "=" && ts[j].s != ";" && ts[j].s != "(" && ts[j].s != "{" {
			j++
		}
		if j >= len(ts) || ts[j].s != "=" || j-1 <= i {
			continue
		}
		name := ts[j-1].s
		k := j + 1
		for k < len(ts) && ts[k].s != ";" {
			k++
		}
		expr := u.expand(ts[j+1:k], 0)
		if v := evalExpr(expr, func(n string) value {
			if x, ok := out[n]; ok {
				return known(x)
			}
			return unknown
		}); v.ok {
			out[name] = v.n
		}
	}
	return out
}
