package gaterule

// Folding a function of the IR at the member values the path proof
// fixes (irproof.go): which edges can run, and what is known of values.

import (
	"regexp"
	"strconv"
	"strings"
)

// irVal is what the proof knows of an integer value: Known, its bits V
// (masked to W bits).
type irVal struct {
	Known bool
	V     uint64
	W     int
}

func known(v uint64, w int) irVal { return irVal{true, v & mask(w), w} }

func mask(w int) uint64 {
	if w <= 0 || w >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(w) - 1
}

func (v irVal) signed() int64 {
	if v.W <= 0 || v.W >= 64 {
		return int64(v.V)
	}
	s := uint(64 - v.W)
	return int64(v.V<<s) >> s
}

// irFields are how the compiled code addresses the folded members: a
// getelementptr's source type and indices after the first (field), and
// the value each load of it folds to.
type irFields map[string]uint64

// edges are a function's executable edges, from block to block.
type edges map[[2]string]bool

// fold finds f's executable edges and its values, at the member values
// of p.fields: a fixed point where every phi meets the values of its
// executable incoming edges and every branch goes where its condition,
// as known, lets it. It gives up folding (every edge executable) when no
// fixed point is found in 32 rounds.
func (p *prover) fold(f *irFunc) (edges, map[string]irVal) {
	prevEdges := edges{}
	prevVals := map[string]irVal{}
	for round := 0; round < 32; round++ {
		vals := map[string]irVal{}
		ex := edges{}
		seen := map[string]bool{f.Blocks[0].Name: true}
		todo := []string{f.Blocks[0].Name}
		for len(todo) > 0 {
			b := f.block(todo[0])
			todo = todo[1:]
			if b == nil {
				continue
			}
			for _, in := range b.Insts {
				if in.Def != "" {
					vals[in.Def] = p.eval(in, b.Name, vals, prevVals, prevEdges)
				}
				if !in.terminator() {
					continue
				}
				for _, s := range p.successors(in, vals) {
					ex[[2]string{b.Name, s}] = true
					if !seen[s] {
						seen[s] = true
						todo = append(todo, s)
					}
				}
			}
		}
		if equalEdges(ex, prevEdges) && equalVals(vals, prevVals) {
			return ex, vals
		}
		prevEdges, prevVals = ex, vals
	}
	all := edges{}
	for _, b := range f.Blocks {
		for _, in := range b.Insts {
			if in.terminator() {
				for _, s := range in.labels() {
					all[[2]string{b.Name, s}] = true
				}
			}
		}
	}
	return all, map[string]irVal{}
}

func equalEdges(a, b edges) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func equalVals(a, b map[string]irVal) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// successors are where terminator in may go, given vals.
func (p *prover) successors(in irInst, vals map[string]irVal) []string {
	ls := in.labels()
	switch in.Op {
	case "br":
		if len(ls) == 2 {
			f := strings.Fields(strings.TrimPrefix(in.Text, "br "))
			if len(f) >= 2 {
				if c := operand(strings.TrimSuffix(f[1], ","), 1, vals); c.Known {
					if c.V != 0 {
						return ls[:1]
					}
					return ls[1:]
				}
			}
		}
		return ls
	case "switch":
		f := strings.Fields(strings.TrimPrefix(in.Text, "switch "))
		if len(f) < 2 || len(ls) == 0 {
			return ls
		}
		w := intWidth(f[0])
		c := operand(strings.TrimSuffix(f[1], ","), w, vals)
		if !c.Known {
			return ls
		}
		// The cases: "iN C, label %x" after the default.
		body := in.Text[strings.Index(in.Text, "[")+1:]
		for _, cs := range caseRe.FindAllStringSubmatch(body, -1) {
			if v := operand(cs[1], w, vals); v.Known && v.V == c.V {
				return []string{cs[2]}
			}
		}
		return ls[:1]
	}
	return ls
}

func intWidth(ty string) int {
	if strings.HasPrefix(ty, "i") {
		if n, err := strconv.Atoi(ty[1:]); err == nil {
			return n
		}
	}
	return 0
}

// operand is what is known of s, a constant or a value, as a w-bit
// integer.
func operand(s string, w int, vals map[string]irVal) irVal {
	switch s {
	case "true":
		return known(1, 1)
	case "false", "null", "zeroinitializer":
		return known(0, w)
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return known(uint64(n), w)
	}
	if v, ok := vals[s]; ok {
		return v
	}
	return irVal{}
}

var (
	icmpRe   = regexp.MustCompile(`^icmp ([a-z]+) (i[0-9]+) ([^ ,]+), ([^ ,]+)`)
	binRe    = regexp.MustCompile(`^(add|sub|mul|and|or|xor|shl|lshr|ashr|udiv|urem)((?: nuw| nsw| exact| disjoint)*) (i[0-9]+) ([^ ,]+), ([^ ,]+)`)
	castRe   = regexp.MustCompile(`^(zext|sext|trunc|freeze)(?: nneg)? (i[0-9]+) ([^ ,]+)(?: to (i[0-9]+))?`)
	selectRe = regexp.MustCompile(`^select i1 ([^ ,]+), (i[0-9]+) ([^ ,]+), i[0-9]+ ([^ ,]+)`)
	phiRe    = regexp.MustCompile(`^phi (i[0-9]+) (.*)$`)
	incRe    = regexp.MustCompile(`\[ ([^ ,]+), (%[^ \]]+) \]`)
	caseRe   = regexp.MustCompile(`i[0-9]+ (-?[0-9]+), label (%[^ \]]+)`)
	loadRe   = regexp.MustCompile(`^load (?:volatile )?(i[0-9]+), (?:i[0-9]+\*|ptr) (%[^ ,]+)`)
)

// eval is what is known of in's value in block b.
func (p *prover) eval(in irInst, b string, vals, prev map[string]irVal, prevEdges edges) irVal {
	t := in.Text
	switch in.Op {
	case "getelementptr":
		return irVal{}
	case "load":
		if mm := loadRe.FindStringSubmatch(t); mm != nil {
			if v, ok := p.fieldOf(mm[2]); ok {
				return known(v, intWidth(mm[1]))
			}
		}
	case "icmp":
		return evalICmp(t, vals)
	case "add", "sub", "mul", "and", "or", "xor", "shl", "lshr", "ashr", "udiv", "urem":
		return evalBinary(t, vals)
	case "zext", "sext", "trunc", "freeze":
		return evalCast(t, vals)
	case "select":
		return evalSelect(t, vals)
	case "phi":
		return evalPhi(t, b, vals, prev, prevEdges)
	}
	return irVal{}
}

// evalICmp is what is known of an integer comparison.
func evalICmp(t string, vals map[string]irVal) irVal {
	mm := icmpRe.FindStringSubmatch(t)
	if mm == nil {
		return irVal{}
	}
	w := intWidth(mm[2])
	a, c := operand(mm[3], w, vals), operand(mm[4], w, vals)
	if !a.Known || !c.Known {
		return irVal{}
	}
	a.W, c.W = w, w
	var r bool
	switch mm[1] {
	case "eq":
		r = a.V == c.V
	case "ne":
		r = a.V != c.V
	case "ult":
		r = a.V < c.V
	case "ule":
		r = a.V <= c.V
	case "ugt":
		r = a.V > c.V
	case "uge":
		r = a.V >= c.V
	case "slt":
		r = a.signed() < c.signed()
	case "sle":
		r = a.signed() <= c.signed()
	case "sgt":
		r = a.signed() > c.signed()
	case "sge":
		r = a.signed() >= c.signed()
	default:
		return irVal{}
	}
	if r {
		return known(1, 1)
	}
	return known(0, 1)
}

// evalBinary is what is known of a binary operation.
func evalBinary(t string, vals map[string]irVal) irVal {
	mm := binRe.FindStringSubmatch(t)
	if mm == nil {
		return irVal{}
	}
	w := intWidth(mm[3])
	a, c := operand(mm[4], w, vals), operand(mm[5], w, vals)
	// x & 0 and x * 0 are 0, x | -1 is -1, whatever x is.
	if mm[1] == "and" || mm[1] == "mul" {
		if (a.Known && a.V == 0) || (c.Known && c.V == 0) {
			return known(0, w)
		}
	}
	if mm[1] == "or" && ((a.Known && a.V == mask(w)) || (c.Known && c.V == mask(w))) {
		return known(mask(w), w)
	}
	if !a.Known || !c.Known {
		return irVal{}
	}
	a.W, c.W = w, w
	switch mm[1] {
	case "add":
		return known(a.V+c.V, w)
	case "sub":
		return known(a.V-c.V, w)
	case "mul":
		return known(a.V*c.V, w)
	case "and":
		return known(a.V&c.V, w)
	case "or":
		return known(a.V|c.V, w)
	case "xor":
		return known(a.V^c.V, w)
	case "shl":
		if c.V < uint64(w) {
			return known(a.V<<c.V, w)
		}
	case "lshr":
		if c.V < uint64(w) {
			return known(a.V>>c.V, w)
		}
	case "ashr":
		if c.V < uint64(w) {
			return known(uint64(a.signed()>>c.V), w)
		}
	case "udiv":
		if c.V != 0 {
			return known(a.V/c.V, w)
		}
	case "urem":
		if c.V != 0 {
			return known(a.V%c.V, w)
		}
	}
	return irVal{}
}

// evalCast is what is known of an integer cast or a freeze.
func evalCast(t string, vals map[string]irVal) irVal {
	mm := castRe.FindStringSubmatch(t)
	if mm == nil {
		return irVal{}
	}
	from := intWidth(mm[2])
	a := operand(mm[3], from, vals)
	if !a.Known {
		return irVal{}
	}
	a.W = from
	to := from
	if mm[4] != "" {
		to = intWidth(mm[4])
	}
	if mm[1] == "sext" {
		return known(uint64(a.signed()), to)
	}
	return known(a.V, to)
}

// evalSelect is what is known of a select.
func evalSelect(t string, vals map[string]irVal) irVal {
	mm := selectRe.FindStringSubmatch(t)
	if mm == nil {
		return irVal{}
	}
	w := intWidth(mm[2])
	c := operand(mm[1], 1, vals)
	x, y := operand(mm[3], w, vals), operand(mm[4], w, vals)
	switch {
	case c.Known && c.V != 0:
		return x
	case c.Known:
		return y
	case x.Known && x == y:
		return x
	}
	return irVal{}
}

// evalPhi is what is known of a phi: the meet of its executable incoming edges' values (prev, prevEdges: the last round's).
func evalPhi(t, b string, vals, prev map[string]irVal, prevEdges edges) irVal {
	mm := phiRe.FindStringSubmatch(t)
	if mm == nil {
		return irVal{}
	}
	w := intWidth(mm[1])
	var out irVal
	first := true
	for _, inc := range incRe.FindAllStringSubmatch(mm[2], -1) {
		if !prevEdges[[2]string{inc[2], b}] {
			continue
		}
		v := operand(inc[1], w, vals)
		if !v.Known {
			if pv, ok := prev[inc[1]]; ok {
				v = pv
			}
		}
		if !v.Known {
			return irVal{}
		}
		if first {
			out, first = v, false
		} else if out.V != v.V {
			return irVal{}
		}
	}
	if !first {
		return known(out.V, w)
	}
	return irVal{}
}

// fieldOf reports whether ptr, a value of the function being folded,
// addresses a folded member, and its value.
func (p *prover) fieldOf(ptr string) (uint64, bool) {
	v, ok := p.fields[p.geps[ptr]]
	return v, ok
}
