package doctor

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ServerOption is one option of SGLang's server launcher: every option
// string argparse accepts for it, the attribute it sets, and how many
// values it takes.
type ServerOption struct {
	Names []string `json:"names"` // "--tp-size", "--tensor-parallel-size"
	Dest  string   `json:"dest"`  // "tp_size"
	// Nargs is argparse's: "0" (a flag), "1" (one value), "?", "*", "+".
	Nargs string `json:"nargs"`
}

// ServerOptions is the option table a command line is read with.
type ServerOptions struct {
	// Source says where the table came from: a tree's server_args.py or
	// doctor's built-in table.
	Source  string         `json:"source"`
	Options []ServerOption `json:"-"`
	// Complete is true for a table read from a tree: an option it does not
	// hold is one SGLang itself refuses. The built-in table holds only the
	// options doctor judges and those sharing their prefixes (Families).
	Complete bool `json:"complete"`
	// Families are the prefixes the built-in table covers completely: an
	// abbreviation that starts with one is judged by the table.
	Families []string `json:"-"`
}

// builtinFamilies are the option prefixes of the built-in table. For each,
// the table holds every option string SGLang's server_args.py declares
// with that prefix at 84118acf50b3, 8905cbd42f4a and 0bda0b168ad5 (their
// union), so a unique prefix there is unique in all three.
//
// Upstream: python/sglang/srt/server_args.py@84118acf50b3a4c74e85e9ff9033792552de1a76 (ServerArgs.add_cli_args),
// python/sglang/srt/server_args.py@8905cbd42f4a27dbecad6487cd3904278756fef8 and
// @0bda0b168ad5bf7311ae639904489a4698a05546 (ServerArgs fields, through
// arg_groups/arg_utils.py add_cli_args_from_dataclass).
var builtinFamilies = []string{"--tp", "--tensor-", "--speculative-", "--disable-custom-", "--base-gpu-", "--gpu-id-", "--dp", "--data-parallel-", "--pp", "--pipeline-", "--nnodes"}

// BuiltinServerOptions returns doctor's own table of the options it judges
// (and every option sharing their prefixes), for when no tree is given.
func BuiltinServerOptions() *ServerOptions {
	o := &ServerOptions{Source: "doctor's built-in table (SGLang 84118acf50b3, 8905cbd42f4a, 0bda0b168ad5)", Families: builtinFamilies}
	for _, row := range strings.Split(strings.TrimSpace(builtinTable), "\n") {
		f := strings.Fields(row)
		o.Options = append(o.Options, ServerOption{Dest: f[0], Nargs: f[1], Names: f[2:]})
	}
	return o
}

// builtinTable: dest, nargs, option strings. Recorded from the three
// commits named in builtinFamilies with ParseServerArgsPy.
const builtinTable = `
base_gpu_id 1 --base-gpu-id
disable_custom_all_reduce 0 --disable-custom-all-reduce
dp_size 1 --dp-size --data-parallel-size
gpu_id_step 1 --gpu-id-step
nnodes 1 --nnodes
pp_async_batch_depth 1 --pp-async-batch-depth
pp_max_micro_batch_size 1 --pp-max-micro-batch-size
pp_size 1 --pp-size --pipeline-parallel-size
speculative_accept_threshold_acc 1 --speculative-accept-threshold-acc
speculative_accept_threshold_single 1 --speculative-accept-threshold-single
speculative_adaptive 0 --speculative-adaptive
speculative_adaptive_config 1 --speculative-adaptive-config
speculative_algorithm 1 --speculative-algorithm
speculative_attention_mode 1 --speculative-attention-mode
speculative_dflash_block_size 1 --speculative-dflash-block-size
speculative_draft_window_size 1 --speculative-dflash-draft-window-size
speculative_draft_attention_backend 1 --speculative-draft-attention-backend
speculative_draft_kv_cache_dtype 1 --speculative-draft-kv-cache-dtype
speculative_draft_load_format 1 --speculative-draft-load-format
speculative_draft_model_path 1 --speculative-draft-model --speculative-draft-model-path
speculative_draft_model_quantization 1 --speculative-draft-model-quantization
speculative_draft_model_revision 1 --speculative-draft-model-revision
speculative_draft_window_size 1 --speculative-draft-window-size
speculative_dspark_align_verify_tokens_to_graph_tier 0 --speculative-dspark-align-verify-tokens-to-graph-tier
speculative_dspark_block_size 1 --speculative-dspark-block-size
speculative_dspark_confidence_sts_path 1 --speculative-dspark-confidence-sts-path
speculative_dspark_sps_table_path 1 --speculative-dspark-sps-table-path
speculative_eagle_topk 1 --speculative-eagle-topk
speculative_moe_a2a_backend 1 --speculative-moe-a2a-backend
speculative_moe_runner_backend 1 --speculative-moe-runner-backend
speculative_ngram_capacity 1 --speculative-ngram-capacity
speculative_ngram_external_corpus_max_tokens 1 --speculative-ngram-external-corpus-max-tokens
speculative_ngram_external_corpus_path 1 --speculative-ngram-external-corpus-path
speculative_ngram_external_sam_budget 1 --speculative-ngram-external-sam-budget
speculative_ngram_match_type 1 --speculative-ngram-match-type
speculative_ngram_max_bfs_breadth 1 --speculative-ngram-max-bfs-breadth
speculative_ngram_max_trie_depth 1 --speculative-ngram-max-trie-depth
speculative_ngram_min_bfs_breadth 1 --speculative-ngram-min-bfs-breadth
speculative_num_draft_tokens 1 --speculative-num-draft-tokens
speculative_num_steps 1 --speculative-num-steps
speculative_skip_dp_mlp_sync 0 --speculative-skip-dp-mlp-sync
speculative_token_map 1 --speculative-token-map
speculative_use_rejection_sampling 0 --speculative-use-rejection-sampling
tp_size 1 --tp-size --tensor-parallel-size
`

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
	byName := map[string]*ServerOption{}
	var names []string
	for i := range o.Options {
		for _, n := range o.Options[i].Names {
			byName[n] = &o.Options[i]
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
	// A built-in table holds every option of a family, so it judges a
	// string inside one; outside them, only an ambiguity is certain.
	covered := o.Complete || slices.ContainsFunc(o.Families, func(f string) bool { return strings.HasPrefix(name, f) })
	switch {
	case len(matches) > 1:
		return nil, val, eq, true, fmt.Sprintf("ambiguous option: %s could match %s", name, strings.Join(matches, ", "))
	case !covered:
		return nil, val, eq, false, ""
	case len(matches) == 1:
		return byName[matches[0]], val, eq, true, ""
	case !o.Complete:
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

var negNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

// Parse reads the launcher's arguments (what follows
// `python -m sglang.launch_server`) with argparse's rules: exact option
// strings and aliases, "--opt=value", unique prefixes (ambiguous ones are
// problems), the last occurrence wins, "--" ends the options, and an
// argument starting with "-" is a value only when it is a negative number.
func (o *ServerOptions) Parse(args []string) *ServerArgs {
	r := &ServerArgs{Values: map[string]string{}, Written: map[string]string{}}
	isOption := func(a string) bool { return strings.HasPrefix(a, "-") && len(a) > 1 && !negNumber.MatchString(a) }
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !isOption(a) {
			if o.Complete {
				r.Problems = append(r.Problems, "unrecognized arguments: "+a)
			}
			continue
		}
		opt, val, hasVal, known, problem := o.lookup(a)
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
// python/sglang/srt/server_args.py, in both shapes upstream has had:
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
	for _, m := range addArgumentRe.FindAllStringIndex(s, -1) {
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
				if end := classEndRe.FindStringIndex(body[nl+1:]); end != nil {
					body = body[:nl+1+end[0]]
				}
			}
			for _, m := range fieldRe.FindAllStringSubmatchIndex(body, -1) {
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
	addArgumentRe = regexp.MustCompile(`\badd_argument\(`)
	fieldRe       = regexp.MustCompile(`(?m)^    ([a-z_][a-z0-9_]*)\s*:\s*(?:A|Annotated)\[`)
	classEndRe    = regexp.MustCompile(`(?m)^\S`)
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
		if k, v, ok := strings.Cut(a, "="); ok && identRe.MatchString(strings.TrimSpace(k)) {
			kw[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return kw
}

var (
	identRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	pyStringRe = regexp.MustCompile(`^\(?\s*[rRuUfF]?("((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')`)
)

// pyString returns the text of a plain Python string literal (or the first
// of implicitly concatenated ones, possibly parenthesised).
func pyString(x string) (string, bool) {
	m := pyStringRe.FindStringSubmatch(strings.TrimSpace(x))
	if m == nil {
		return "", false
	}
	if strings.HasPrefix(m[1], `"`) {
		return m[2], true
	}
	return m[3], true
}
