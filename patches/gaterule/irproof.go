package gaterule

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// The path proof: on the LLVM IR the judge keeps beside its binary (the
// dispatch compiled as the build compiles it, at -O1, with line tables),
// every path from an entry (cxx/judge.cu's arpatch_judge_allreduce_*,
// allreduce<T> as all_reduce calls it) to a return must pass a launch,
// whatever the conditions on the way test. The sampling judge calls the
// dispatch at chosen sizes; the proof covers every size, call count,
// pointer and variable the code may test, because it does not evaluate
// them: a branch on anything but the members the constructor set
// (world_size_ and full_nvlink_, folded to the values the driver
// reported) is taken both ways.
//
// A launch is a call of one of the stub runtime's launch recorders
// (launchFuncs), or of a function the tree defines that launches on
// every path to its return (a kernel's host stub, a helper), at the same
// member values. A path that throws out of the function, or ends in
// `unreachable` (a call that does not return: a throw, abort), is not a
// return. A throw caught inside the dispatch and followed by a return is
// a return.
//
// What the proof does not see: the launch's grid and arguments (the
// sampling judge checks those at its sizes), members other than the two
// it folds (their loads are unknown, which can only widen the paths), and
// a member changed through a pointer the compiled code does not address
// as the member (refused where it does: fieldWrite).

// launchFuncs are the stub runtime's functions that record a launch
// (cxx/judge.cu, noinline there so that each stays a call).
var launchFuncs = []string{"cudaLaunch", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "arpatch_record_explicit"}

// proofEntries are the functions the proof starts from, one an element
// type (cxx/judge.cu).
var proofEntries = []struct{ Func, DType string }{
	{"arpatch_judge_allreduce_float", "float32"},
	{"arpatch_judge_allreduce_half", "float16"},
	{"arpatch_judge_allreduce_bfloat16", "bfloat16"},
}

// fieldProbes are the functions whose one member address tells the proof
// how the compiled code addresses world_size_ and full_nvlink_.
const (
	probeWorld  = "arpatch_field_world_size"
	probeNVLink = "arpatch_field_full_nvlink"
)

// proofOf is the proof's verdict on one entry at one pair of member
// values: Returns is false when every path to a return launches; else
// Path is the blocks of one path that does not, Fn the function.
type proofOf struct {
	Returns bool
	Fn      string
	Path    []string
	At      []string // the source lines of the path's decisions and its return
}

type prover struct {
	m       *irModule
	fields  irFields
	memo    map[string]int     // function: 0 working, 1 launches on every path, 2 not
	proofs  map[string]proofOf // function: its proof, where it does not launch
	geps    map[string]string  // the function being folded: gepKeys
	treeRel func(string) string
}

// prove runs the proof of every entry with world_size_ and full_nvlink_
// as given (fields from keys); it returns each entry's result.
func (m *irModule) prove(world, nvlink int, treeRel func(string) string) (map[string]proofOf, error) {
	fields := irFields{}
	if k := m.probeKey(probeWorld); k != "" && world >= 0 {
		fields[k] = uint64(world)
	}
	if k := m.probeKey(probeNVLink); k != "" && nvlink >= 0 {
		fields[k] = uint64(nvlink)
	}
	p := &prover{m: m, fields: fields, memo: map[string]int{}, treeRel: treeRel}
	out := map[string]proofOf{}
	for _, e := range proofEntries {
		f := m.Funcs[e.Func]
		if f == nil {
			return nil, fmt.Errorf("the judge's IR has no %s: the proof's entry is missing", e.Func)
		}
		out[e.DType] = p.run(f)
	}
	return out, nil
}

// launches reports whether every path of f to a return passes a launch.
func (p *prover) launches(name string) bool {
	if slices.Contains(launchFuncs, name) {
		return true
	}
	f := p.m.Funcs[name]
	if f == nil {
		return false
	}
	switch p.memo[name] {
	case 1:
		return true
	case 2:
		return false
	}
	if _, working := p.memo[name]; working {
		return false // recursion: not known to launch
	}
	p.memo[name] = 0
	r := p.run(f)
	if r.Returns {
		p.memo[name] = 2
		if p.proofs == nil {
			p.proofs = map[string]proofOf{}
		}
		p.proofs[name] = r
	} else {
		p.memo[name] = 1
	}
	return !r.Returns
}

// run proves f: it returns the first path (breadth first) from f's entry
// to a return that passes no launch, if any.
func (p *prover) run(f *irFunc) proofOf {
	saved := p.geps
	p.geps = gepKeys(f)
	ex, _ := p.fold(f)
	p.geps = saved
	entry := f.Blocks[0].Name
	parent := map[string]string{entry: ""}
	todo := []string{entry}
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		b := f.block(name)
		if b == nil || len(b.Insts) == 0 {
			continue
		}
		launched := false
		for _, in := range b.Insts[:len(b.Insts)-1] {
			if in.Op == "call" && p.launches(in.callee()) {
				launched = true
				break
			}
		}
		if launched {
			continue
		}
		term := b.Insts[len(b.Insts)-1]
		if term.Op == "ret" {
			path := []string{}
			for at := name; at != ""; at = parent[at] {
				path = append([]string{at}, path...)
			}
			return proofOf{Returns: true, Fn: f.Name, Path: path, At: p.where(f, path)}
		}
		next := p.successorsOf(b, ex)
		if term.Op == "invoke" {
			c := term.callee()
			if slices.Contains(launchFuncs, c) {
				continue
			}
			if ls := term.labels(); len(ls) == 2 && p.launches(c) {
				// It launched where it returns: only its unwind edge goes on.
				next = nil
				if ex[[2]string{name, ls[1]}] {
					next = []string{ls[1]}
				}
			}
		}
		for _, s := range next {
			if _, ok := parent[s]; !ok {
				parent[s] = name
				todo = append(todo, s)
			}
		}
	}
	return proofOf{Fn: f.Name}
}

// successorsOf are b's executable successors, in its terminator's order.
func (p *prover) successorsOf(b *irBlock, ex edges) []string {
	var out []string
	for _, s := range b.Insts[len(b.Insts)-1].labels() {
		if ex[[2]string{b.Name, s}] && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

var (
	metaLineRe  = regexp.MustCompile(`line: ([0-9]+)`)
	metaScopeRe = regexp.MustCompile(`scope: (![0-9]+)`)
	metaFileRe  = regexp.MustCompile(`file: (![0-9]+)`)
	metaInlRe   = regexp.MustCompile(`inlinedAt: (![0-9]+)`)
	metaNameRe  = regexp.MustCompile(`filename: "((?:[^"\\]|\\.)*)"`)
)

// where are the tree's source lines of path's decisions (its blocks'
// conditional branches and switches) and of its return, each once, in
// order, with those of the calls on the way that return without a
// launch (a helper, allreduce<T> itself where it is not inlined).
func (p *prover) where(f *irFunc, path []string) []string {
	var out []string
	for _, name := range path {
		b := f.block(name)
		for _, in := range b.Insts {
			if r, ok := p.proofs[in.callee()]; ok {
				for _, l := range r.At {
					if !slices.Contains(out, l) {
						out = append(out, l)
					}
				}
			}
		}
		term := b.Insts[len(b.Insts)-1]
		if (term.Op == "br" && len(term.labels()) == 2) || term.Op == "switch" || term.Op == "ret" {
			if l := p.line(term.Dbg); l != "" && !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out
}

// line is the tree file and line of a !DILocation, or of the first
// location it was inlined at that is in the tree; "" when none is.
func (p *prover) line(loc string) string {
	for depth := 0; loc != "" && depth < 16; depth++ {
		node := p.m.Meta[loc]
		ln := metaLineRe.FindStringSubmatch(node)
		sc := metaScopeRe.FindStringSubmatch(node)
		if ln != nil && sc != nil {
			if file := p.fileOf(sc[1]); file != "" {
				return file + ":" + ln[1]
			}
		}
		inl := metaInlRe.FindStringSubmatch(node)
		if inl == nil {
			return ""
		}
		loc = inl[1]
	}
	return ""
}

// fileOf is the tree-relative file of a scope, "" when it is not the
// tree's (the judge's own files, system headers).
func (p *prover) fileOf(scope string) string {
	fm := metaFileRe.FindStringSubmatch(p.m.Meta[scope])
	if fm == nil {
		return ""
	}
	nm := metaNameRe.FindStringSubmatch(p.m.Meta[fm[1]])
	if nm == nil || p.treeRel == nil {
		return ""
	}
	return p.treeRel(nm[1])
}

// ctorRe names CustomAllreduce's constructors, which set the folded
// members, and the driver's arpatch_construct, where they are inlined.
var ctorRe = regexp.MustCompile(`CustomAllreduceC[12]E|^arpatch_construct$`)

// mutators are the functions that run on a constructed CustomAllreduce:
// the proof's entries, CustomAllreduce's other members (register_buffer
// and the rest), and every function they call or name, constructors left
// out.
func (m *irModule) mutators() []string {
	var roots []string
	for n := range m.Funcs {
		if strings.Contains(n, "CustomAllreduce") {
			roots = append(roots, n)
		}
	}
	for _, e := range proofEntries {
		roots = append(roots, e.Func)
	}
	return m.reach(roots, ctorRe.MatchString)
}

// fieldWrite returns a function whose code may change world_size_ or
// full_nvlink_ after the constructor set them, and where, and how: a
// function that runs on a constructed CustomAllreduce (mutators) and
// uses the address of a folded member for anything but a load (a store,
// a call, a cast), or writes the object through a cast of its own address
// (a byte offset the compiled code does not form as a member's); or a
// constructor that uses a folded member's address for anything but a
// load or a store into it (it hands the address on, for a later write).
// Any of these would make the values the proof folds wrong.
func (m *irModule) fieldWrite(treeRel func(string) string) (fn, at, how string) {
	keys := map[string]bool{}
	class := ""
	for _, pr := range []string{probeWorld, probeNVLink} {
		if k := m.probeKey(pr); k != "" {
			keys[k] = true
			class, _, _ = strings.Cut(k, "|")
		}
	}
	if len(keys) == 0 {
		return "", "", ""
	}
	p := &prover{m: m, treeRel: treeRel}
	for _, n := range m.mutators() {
		if in, ok := fieldUse(m.Funcs[n], keys, false); ok {
			return n, p.line(in.Dbg), "changes CustomAllreduce's world_size_ or full_nvlink_, or hands its address on, after the constructor set it"
		}
		if in, ok := rawWrite(m.Funcs[n], class); ok {
			return n, p.line(in.Dbg), "writes CustomAllreduce through a cast of its own address, which may change world_size_ or full_nvlink_ after the constructor set it"
		}
	}
	var ctors []string
	for n := range m.Funcs {
		if ctorRe.MatchString(n) {
			ctors = append(ctors, n)
		}
	}
	slices.Sort(ctors)
	for _, n := range ctors {
		if in, ok := fieldUse(m.Funcs[n], keys, true); ok {
			return n, p.line(in.Dbg), "hands the address of world_size_ or full_nvlink_ on in the constructor, so that later code may change it"
		}
	}
	return "", "", ""
}

var storeRe = regexp.MustCompile(`^store (?:atomic )?(?:volatile )?\S+ ([^ ,]+), (?:\S+\*|ptr) (%[^ ,]+)`)

// fieldUse returns the first instruction of f that uses the address of a
// member of keys for anything but a load from it (or, with stores, a
// store into it).
func fieldUse(f *irFunc, keys map[string]bool, stores bool) (irInst, bool) {
	for def, k := range gepKeys(f) {
		if !keys[k] {
			continue
		}
		tok := regexp.MustCompile(regexp.QuoteMeta(def) + `([ ,)]|$)`)
		for _, b := range f.Blocks {
			for _, in := range b.Insts {
				uses := len(tok.FindAllString(in.Text, -1))
				if in.Def == def || uses == 0 {
					continue
				}
				if uses == 1 {
					if mm := loadRe.FindStringSubmatch(in.Text); mm != nil && mm[2] == def {
						continue
					}
					if mm := storeRe.FindStringSubmatch(in.Text); stores && mm != nil && mm[2] == def {
						continue
					}
				}
				return in, true
			}
		}
	}
	return irInst{}, false
}

var irOperandRe = regexp.MustCompile(`%(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)`)

// rawWrite returns the first instruction of f that stores through, or
// hands to a call, an address computed from a cast of a pointer to class
// (the object's own address as bytes or another type), if any.
func rawWrite(f *irFunc, class string) (irInst, bool) {
	if class == "" {
		return irInst{}, false
	}
	seed := regexp.MustCompile(`^(?:bitcast|ptrtoint) ` + regexp.QuoteMeta(class) + `\* `)
	raw := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, b := range f.Blocks {
			for _, in := range b.Insts {
				if in.Def == "" || raw[in.Def] {
					continue
				}
				derived := seed.MatchString(in.Text)
				switch in.Op {
				case "bitcast", "getelementptr", "ptrtoint", "inttoptr", "add", "sub", "or", "and", "xor", "select", "phi":
					for _, o := range irOperandRe.FindAllString(in.Text, -1) {
						derived = derived || raw[o]
					}
				}
				if derived {
					raw[in.Def] = true
					changed = true
				}
			}
		}
	}
	for _, b := range f.Blocks {
		for _, in := range b.Insts {
			if mm := storeRe.FindStringSubmatch(in.Text); mm != nil && raw[mm[2]] {
				return in, true
			}
			if in.Op == "call" || in.Op == "invoke" {
				if strings.HasPrefix(in.callee(), "llvm.lifetime") || strings.HasPrefix(in.callee(), "llvm.dbg") {
					continue
				}
				for _, o := range irOperandRe.FindAllString(in.Text, -1) {
					if raw[o] {
						return in, true
					}
				}
			}
		}
	}
	return irInst{}, false
}

// demangled is a C++ function's name as its source spells it, without
// its parameters (sglang::CustomAllreduce::allreduce<float>), or name.
func demangled(name string) string {
	if d, err := demangle.ToString(name, demangle.NoParams); err == nil {
		return d
	}
	return name
}

// deviceWriters are the stub runtime's calls that write device memory
// besides a kernel: a dispatch that calls one may overwrite the kernel's
// output (a copy of the input over the sum, a memset).
var deviceWriters = regexp.MustCompile(`^(cudaMemcpy|cudaMemset|cuMemcpy|cuMemset|cuMemsetD)`)

// reachable are the functions the proof's entries call or name (take
// the address of), directly or through others, each once, sorted.
func (m *irModule) reachable() []string {
	var roots []string
	for _, e := range proofEntries {
		roots = append(roots, e.Func)
	}
	return m.reach(roots, func(string) bool { return false })
}

// reach is the functions roots lead to, sorted, each once, skip's left
// out (and not followed): every function and variable a function names,
// called or not, since one whose address is taken, or kept in a
// variable, may be called through it.
func (m *irModule) reach(roots []string, skip func(string) bool) []string {
	seen := map[string]bool{}
	todo := slices.Clone(roots)
	for len(todo) > 0 {
		n := todo[0]
		todo = todo[1:]
		if seen[n] || skip(n) {
			continue
		}
		if f := m.Funcs[n]; f != nil {
			seen[n] = true
			for _, b := range f.Blocks {
				for _, in := range b.Insts {
					todo = append(todo, globalsNamed(in.Text)...)
				}
			}
		} else if g, ok := m.Globals[n]; ok {
			seen[n] = true
			_, init, _ := strings.Cut(g, " = ")
			todo = append(todo, globalsNamed(init)...)
		}
	}
	var out []string
	for n := range seen {
		if m.Funcs[n] != nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// globalsNamed are the functions and variables a text of IR names.
func globalsNamed(text string) []string {
	var out []string
	for _, g := range irGlobalRe.FindAllStringSubmatch(text, -1) {
		out = append(out, strings.Trim(g[1], `"`))
	}
	return out
}

// deviceWrite returns a function the dispatch runs that writes device
// memory besides a kernel (deviceWriters), what it calls, and where.
func (m *irModule) deviceWrite(treeRel func(string) string) (fn, callee, at string) {
	p := &prover{m: m, treeRel: treeRel}
	for _, n := range m.reachable() {
		for _, b := range m.Funcs[n].Blocks {
			for _, in := range b.Insts {
				// Called, or its address taken (a call through a pointer),
				// here or in a variable this names.
				names := globalsNamed(in.Text)
				for _, g := range names {
					if v, ok := m.Globals[g]; ok {
						_, init, _ := strings.Cut(v, " = ")
						names = append(names, globalsNamed(init)...)
					}
				}
				for _, c := range names {
					if deviceWriters.MatchString(c) {
						return n, c, p.line(in.Dbg)
					}
				}
			}
		}
	}
	return "", "", ""
}
