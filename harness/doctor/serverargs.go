package doctor

import (
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/internal/lazyre"
)

// ServerOption is one option of SGLang's server launcher: every option
// string argparse accepts for it, the attribute it sets, and how many
// values it takes.
type ServerOption struct {
	Names []string `json:"names"` // "--tp-size", "--tensor-parallel-size"
	Dest  string   `json:"dest"`  // "tp_size"
	// Nargs is argparse's: "0" (a flag), "1" (one value), "?", "*", "+".
	Nargs string `json:"nargs"`
	// In lists the built-in table's commits (BuiltinCommits indexes) that
	// hold the option; nil in a tree's table.
	In []int `json:"-"`
}

// ServerOptions is the option table a command line is read with.
type ServerOptions struct {
	// Source says where the table came from: a tree's server_args.py or
	// doctor's built-in table.
	Source  string         `json:"source"`
	Options []ServerOption `json:"-"`
	// Complete is true for a table read from a tree: an option it does not
	// hold is one SGLang itself refuses.
	Complete bool `json:"complete"`
	// Eras is the number of SGLang commits the built-in table holds (0 for
	// a tree's table); each option's In says which.
	Eras int `json:"-"`
}

// BuiltinCommits are the SGLang commits whose options the built-in table
// holds (builtin_options.txt's letters a, b, c, in that order).
//
// Upstream: python/sglang/srt/server_args.py@84118acf50b3a4c74e85e9ff9033792552de1a76 (ServerArgs.add_cli_args);
// Upstream: python/sglang/srt/server_args.py@8905cbd42f4a27dbecad6487cd3904278756fef8
// (ServerArgs fields, through arg_groups/arg_utils.py
// add_cli_args_from_dataclass), also at 0bda0b168ad5bf7311ae639904489a4698a05546.
var BuiltinCommits = []string{"84118acf50b3a4c74e85e9ff9033792552de1a76", "8905cbd42f4a27dbecad6487cd3904278756fef8", "0bda0b168ad5bf7311ae639904489a4698a05546"}

//go:embed builtin_options.txt
var builtinTable string

// BuiltinServerOptions returns doctor's own table: every option string of
// SGLang's launcher at BuiltinCommits, each marked with the commits that
// hold it, for when no tree is given. An option string is resolved at
// each commit as argparse would there (exact, =, unique prefix); where the
// commits agree that is the answer, and where they differ, or none holds
// it, the string is not judged (the server's SGLang may be another).
func BuiltinServerOptions() *ServerOptions {
	o := &ServerOptions{Source: "doctor's built-in table (SGLang 84118acf50b3, 8905cbd42f4a, 0bda0b168ad5)", Eras: len(BuiltinCommits)}
	for _, row := range strings.Split(strings.TrimSpace(builtinTable), "\n") {
		if strings.HasPrefix(row, "#") {
			continue
		}
		f := strings.Fields(row)
		var eras []int
		for _, c := range f[0] {
			eras = append(eras, int(c-'a'))
		}
		o.Options = append(o.Options, ServerOption{In: eras, Dest: f[1], Nargs: f[2], Names: f[3:]})
	}
	return o
}

// lookup resolves an option string as argparse does
// (ArgumentParser._parse_optional with allow_abbrev): an exact option
// string, then "--name=value" with an exact name, then a unique prefix of
// one option string (of the part before "="). It returns the option, the
// value given with "=" (hasValue), and a problem: an ambiguous prefix, or
// an option the table does not hold. known is false when a built-in table
// cannot judge the string (no family covers it).
//
// Upstream: CPython Lib/argparse.py (ArgumentParser._parse_optional, _get_option_tuples).
func (o *ServerOptions) lookup(arg string) (opt *ServerOption, value string, hasValue bool, known bool, problem string) {
	if o.Eras == 0 {
		return resolve(o.Options, nil, o.Complete, arg)
	}
	var first *ServerOption
	for era := range o.Eras {
		p, v, has, _, prob := resolve(o.Options, &era, true, arg)
		if era == 0 {
			first, opt, value, hasValue, problem = p, p, v, has, prob
			continue
		}
		if !sameOption(first, p) || (problem == "") != (prob == "") || strings.HasPrefix(problem, "ambiguous") != strings.HasPrefix(prob, "ambiguous") {
			return nil, v, has, false, "" // the commits differ: not judged
		}
		if prob != "" {
			problem = prob // the newest commit's wording
		}
	}
	if strings.HasPrefix(problem, "unrecognized") {
		return nil, value, hasValue, false, "" // in none of them: the server's SGLang may have it
	}
	return opt, value, hasValue, true, problem
}

func sameOption(a, b *ServerOption) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := slices.Clone(a.Names), slices.Clone(b.Names)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y) && a.Nargs == b.Nargs
}

// resolve is lookup in one option table (only the options of era, when
// it is not nil).
//
// Upstream: CPython Lib/argparse.py (ArgumentParser._parse_optional, _get_option_tuples).
func resolve(options []ServerOption, era *int, complete bool, arg string) (opt *ServerOption, value string, hasValue bool, known bool, problem string) {
	byName := map[string]*ServerOption{}
	var names []string
	for i := range options {
		if era != nil && !slices.Contains(options[i].In, *era) {
			continue
		}
		for _, n := range options[i].Names {
			byName[n] = &options[i]
			names = append(names, n)
		}
	}
	if p, ok := byName[arg]; ok {
		return p, "", false, true, ""
	}
	name, val, eq := strings.Cut(arg, "=")
	if p, ok := byName[name]; ok && eq {
		return p, val, true, true, ""
	}
	var matches []string
	for _, n := range names {
		if strings.HasPrefix(n, name) {
			matches = append(matches, n)
		}
	}
	switch {
	case len(matches) > 1:
		return nil, val, eq, true, fmt.Sprintf("ambiguous option: %s could match %s", name, strings.Join(matches, ", "))
	case len(matches) == 1:
		return byName[matches[0]], val, eq, true, ""
	case !complete:
		return nil, val, eq, false, ""
	}
	return nil, val, eq, true, "unrecognized arguments: " + arg
}

// ServerArgs is a launcher command line as argparse reads it.
type ServerArgs struct {
	// Values maps every option string of each option given (aliases
	// included) to its last value: "" for a flag, the values of a
	// multi-value option joined by spaces. Values["--tp-size"] is set by
	// --tp-size, --tensor-parallel-size or --tp 8.
	Values map[string]string `json:"values"`
	// Written maps the same keys to the option string as the user wrote
	// it, e.g. "--speculative-algo" for --speculative-algorithm.
	Written map[string]string `json:"written"`
	// Problems are what argparse would refuse: ambiguous prefixes,
	// unrecognized options (with a complete table), missing values.
	Problems []string `json:"problems,omitempty"`
	// NotJudged lists options a built-in table cannot judge.
	NotJudged []string `json:"not_judged,omitempty"`
}

var negNumber = lazyre.New(`^-\d+$|^-\d*\.\d+$`)

// Parse reads the launcher's arguments (what follows
// `python -m sglang.launch_server`) with argparse's rules: exact option
// strings and aliases, "--opt=value", unique prefixes (ambiguous ones are
// problems), the last occurrence wins, "--" ends the options, and an
// argument starting with "-" is a value only when it is a negative number.
func (o *ServerOptions) Parse(args []string) *ServerArgs {
	r := &ServerArgs{Values: map[string]string{}, Written: map[string]string{}}
	isOption := func(a string) bool { return strings.HasPrefix(a, "-") && len(a) > 1 && !negNumber().MatchString(a) }
	afterUnknown := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			// Everything after it is positional, and SGLang's parser
			// declares no positional argument: parse_args refuses them.
			if rest := args[i+1:]; len(rest) > 0 {
				r.Problems = append(r.Problems, "unrecognized arguments: "+strings.Join(rest, " ")+" (after --)")
			}
			break
		}
		if !isOption(a) {
			// A word no option took: SGLang declares no positional
			// argument. With a built-in table, the option before it may
			// be one it cannot judge, which may take more values.
			if o.Complete || !afterUnknown {
				r.Problems = append(r.Problems, "unrecognized arguments: "+a)
			}
			continue
		}
		opt, val, hasVal, known, problem := o.lookup(a)
		afterUnknown = opt == nil
		if problem != "" {
			r.Problems = append(r.Problems, problem)
		}
		nargs := "?" // an option doctor cannot judge: take a value if one follows
		if opt != nil {
			nargs = opt.Nargs
		} else if !known {
			r.NotJudged = append(r.NotJudged, a)
		}
		var vals []string
		switch {
		case hasVal && nargs == "0":
			r.Problems = append(r.Problems, fmt.Sprintf("argument %s: ignored explicit argument '%s'", a, val))
		case hasVal:
			vals = []string{val}
		default:
			limit := -1 // "*" and "+": every value that follows
			switch nargs {
			case "0":
				limit = 0
			case "1", "?":
				limit = 1
			default:
				if n, err := strconv.Atoi(nargs); err == nil {
					limit = n
				}
			}
			for i+1 < len(args) && !isOption(args[i+1]) && args[i+1] != "--" && (limit < 0 || len(vals) < limit) {
				i++
				vals = append(vals, args[i])
			}
			switch {
			case len(vals) == 0 && (nargs == "1" || nargs == "+"):
				r.Problems = append(r.Problems, fmt.Sprintf("argument %s: expected one argument", a))
			case limit > 1 && len(vals) < limit:
				r.Problems = append(r.Problems, fmt.Sprintf("argument %s: expected %d arguments", a, limit))
			}
		}
		if opt != nil {
			for _, n := range opt.Names {
				r.Values[n] = strings.Join(vals, " ")
				r.Written[n] = strings.SplitN(a, "=", 2)[0]
			}
		}
	}
	return r
}

// ParseServerArgsPy reads the option table out of a tree's
// server_args.py (python/sglang/srt/), in both shapes upstream has had:
// explicit parser.add_argument("--a", "--b", ...) calls (84118acf50b3),
// and ServerArgs dataclass fields annotated A[T, "help"] or
// A[T, Arg(aliases=[...], cli_name=..., action=..., nargs=...)] that
// add_cli_args_from_dataclass turns into options (8905cbd42f4a and later:
// cli_name or --field-name plus aliases; bool is store_true; a List type
// without type_parser takes "+"; BooleanOptionalAction adds --no-NAME).
// It reads the source text; nothing is imported or run. The error names
// the file when no option is found.
//
// Upstream: python/sglang/srt/arg_groups/arg_utils.py@8905cbd42f4a27dbecad6487cd3904278756fef8 (add_cli_args_from_dataclass).
func ParseServerArgsPy(name string, src []byte) (*ServerOptions, error) {
	s := string(src)
	o := &ServerOptions{Source: name, Complete: true}
	add := func(names []string, dest, action, nargs string) {
		if len(names) == 0 {
			return
		}
		if dest == "" {
			dest = strings.ReplaceAll(strings.TrimLeft(names[0], "-"), "-", "_")
		}
		n := "1"
		switch {
		case nargs != "":
			n = nargs
		case action == "":
		case strings.Contains(action, "BooleanOptional"):
			n = "0"
			for _, x := range names {
				if strings.HasPrefix(x, "--") {
					names = append(names, "--no-"+x[2:])
				}
			}
		case strings.Contains(action, "store_true"), strings.Contains(action, "store_false"), strings.Contains(action, "store_const"),
			strings.Contains(action, "count"), strings.Contains(action, "StoreTrue"), strings.Contains(action, "StoreConst"),
			action == "DeprecatedAction", strings.HasSuffix(action, ".DeprecatedAction"):
			n = "0"
		}
		o.Options = append(o.Options, ServerOption{Names: names, Dest: dest, Nargs: n})
	}
	for _, m := range addArgumentRe().FindAllStringIndex(s, -1) {
		args := pyArgs(s, m[1]-1)
		var names []string
		for _, a := range args {
			if lit, ok := pyString(a); ok && strings.HasPrefix(lit, "-") {
				names = append(names, lit)
			}
		}
		kw := pyKeywords(args)
		dest, _ := pyString(kw["dest"])
		nargs, _ := pyString(kw["nargs"])
		if nargs == "" && kw["nargs"] != "" {
			nargs = kw["nargs"] // an int
		}
		action, ok := pyString(kw["action"])
		if !ok {
			action = kw["action"]
		}
		add(names, dest, action, nargs)
	}
	if strings.Contains(s, "add_cli_args_from_dataclass(parser, ServerArgs)") {
		if start := strings.Index(s, "\nclass ServerArgs"); start >= 0 {
			body := s[start+1:]
			if nl := strings.IndexByte(body, '\n'); nl >= 0 {
				if end := classEndRe().FindStringIndex(body[nl+1:]); end != nil {
					body = body[:nl+1+end[0]]
				}
			}
			for _, m := range fieldRe().FindAllStringSubmatchIndex(body, -1) {
				field := body[m[2]:m[3]]
				parts := pyArgs(body, m[1]-1)
				if len(parts) < 2 {
					continue
				}
				typ, meta := parts[0], parts[1:]
				var arg string
				described := false
				for _, x := range meta {
					if _, ok := pyString(x); ok {
						described = true
					}
					if strings.HasPrefix(x, "Arg(") {
						arg, described = x, true
					}
				}
				if !described {
					continue
				}
				kw := map[string]string{}
				if arg != "" {
					kw = pyKeywords(pyArgs(arg, len("Arg")))
				}
				if kw["no_cli"] == "True" {
					continue
				}
				cli := "--" + strings.ReplaceAll(field, "_", "-")
				if c, ok := pyString(kw["cli_name"]); ok {
					cli = c
				}
				names := []string{cli}
				if al := kw["aliases"]; strings.HasPrefix(al, "[") {
					for _, x := range pyArgs(al, 0) {
						if lit, ok := pyString(x); ok {
							names = append(names, lit)
						}
					}
				}
				action, ok := pyString(kw["action"])
				if !ok {
					action = kw["action"]
				}
				nargs, _ := pyString(kw["nargs"])
				inner := strings.TrimSpace(typ)
				if strings.HasPrefix(inner, "Optional[") {
					inner = strings.TrimSuffix(strings.TrimPrefix(inner, "Optional["), "]")
				}
				switch {
				case action != "" || nargs != "":
				case inner == "bool":
					action = "store_true"
				case (strings.HasPrefix(inner, "List[") || strings.HasPrefix(inner, "list[")) && kw["type_parser"] == "":
					nargs = "+"
				}
				add(names, field, action, nargs)
			}
		}
	}
	if len(o.Options) == 0 {
		return nil, fmt.Errorf("%s: no server options found (neither parser.add_argument calls nor ServerArgs fields)", name)
	}
	return o, nil
}

var (
	addArgumentRe = lazyre.New(`\badd_argument\(`)
	fieldRe       = lazyre.New(`(?m)^    ([a-z_][a-z0-9_]*)\s*:\s*(?:A|Annotated)\[`)
	classEndRe    = lazyre.New(`(?m)^\S`)
)

// pyArgs splits the bracketed Python expression whose opening bracket is
// at s[open] into its top-level comma-separated parts, trimmed. Strings
// (with their prefixes, triple quotes and escapes) and comments are
// skipped over; an unclosed bracket ends at the end of s.
func pyArgs(s string, open int) []string {
	var parts []string
	depth := 0
	start := open + 1
	for i := open; i < len(s); i++ {
		switch c := s[i]; c {
		case '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case '\'', '"':
			q := string(c)
			if strings.HasPrefix(s[i:], q+q+q) {
				q = q + q + q
			}
			i += len(q)
			for i < len(s) && !strings.HasPrefix(s[i:], q) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i += len(q) - 1
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				if p := strings.TrimSpace(s[start:i]); p != "" {
					parts = append(parts, p)
				}
				return parts
			}
		case ',':
			if depth == 1 {
				parts = append(parts, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return parts
}

// pyKeywords maps the name=value parts of a call's arguments.
func pyKeywords(args []string) map[string]string {
	kw := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && identRe().MatchString(strings.TrimSpace(k)) {
			kw[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return kw
}

var (
	identRe    = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)
	pyStringRe = lazyre.New(`^\(?\s*[rRuUfF]?("((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')`)
)

// pyString returns the text of a plain Python string literal (or the first
// of implicitly concatenated ones, possibly parenthesised).
func pyString(x string) (string, bool) {
	m := pyStringRe().FindStringSubmatch(strings.TrimSpace(x))
	if m == nil {
		return "", false
	}
	if strings.HasPrefix(m[1], `"`) {
		return m[2], true
	}
	return m[3], true
}
