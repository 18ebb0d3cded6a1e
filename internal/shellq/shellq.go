// Package shellq quotes words for a POSIX shell, so that every command
// arpatch prints (remedies, plans, recorded commands) runs as printed
// when pasted, and splits a line a user gives (bench --arm's args=) into
// words as sh would, expanding nothing. It is the one place that decides
// what needs quoting (mvdan.cc/sh's syntax.Quote makes that decision) and
// how a line splits (mvdan.cc/sh's parser).
package shellq

import (
	"fmt"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Quote returns s as one POSIX shell word: s itself when it needs no
// quoting, else a quoted form that the shell reads back as s. Control
// characters (a tab, a newline), which syntax.Quote declines in POSIX
// mode, go inside single quotes, where sh keeps every byte. A word the
// shell cannot hold (a NUL byte) is shown as Go would quote it, which no
// shell reads back: such a command cannot be run as printed anyway.
func Quote(s string) string {
	q, err := syntax.Quote(s, syntax.LangPOSIX)
	switch {
	case err == nil:
		return q
	case strings.ContainsRune(s, 0):
		return strconv.Quote(s)
	default:
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
}

// Join joins words into one command line, each word quoted by Quote.
func Join(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = Quote(w)
	}
	return strings.Join(out, " ")
}

// Assign returns the shell assignment word key=value with value quoted by
// Quote: `export ` + Assign(k, v) sets k to exactly v when pasted. key
// must be a variable name (recipes and plans check theirs); it is written
// as it is.
func Assign(key, value string) string { return key + "=" + Quote(value) }

// AssignKV is Assign of "KEY=VALUE", split at its first '='; a word
// without '=' is quoted whole.
func AssignKV(kv string) string {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return Quote(kv)
	}
	return Assign(k, v)
}

// Path quotes a path like Quote, but leaves a leading "~/" outside the
// quotes so that the shell still expands it to the home directory.
func Path(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return "~/" + Quote(rest)
	}
	return Quote(p)
}

// Split splits s into words as sh does (quotes, backslashes), with no
// expansion: a $VARIABLE, $(command) or $((arithmetic)) is refused, naming
// it, and a brace or a tilde stays literal. Quote's words read back as
// themselves. A syntax error (an unclosed quote) is mvdan.cc/sh's, with
// its position.
func Split(s string) ([]string, error) {
	var out []string
	for w, err := range syntax.NewParser().WordsSeq(strings.NewReader(s)) {
		if err != nil {
			return nil, err
		}
		var exp string
		syntax.Walk(w, func(n syntax.Node) bool {
			switch n.(type) {
			case *syntax.ParamExp, *syntax.CmdSubst, *syntax.ArithmExp, *syntax.ProcSubst, *syntax.ExtGlob:
				if exp == "" {
					exp = s[n.Pos().Offset():n.End().Offset()]
				}
			}
			return true
		})
		if exp != "" {
			return nil, fmt.Errorf("%s: arpatch does not expand it; write the value, or quote the '$' with single quotes", exp)
		}
		var b strings.Builder
		for _, p := range w.Parts {
			switch p := p.(type) {
			case *syntax.Lit:
				b.WriteString(unescape(p.Value, ""))
			case *syntax.SglQuoted:
				b.WriteString(p.Value)
			case *syntax.DblQuoted:
				for _, q := range p.Parts {
					if l, ok := q.(*syntax.Lit); ok {
						b.WriteString(unescape(l.Value, "$`\"\\\n"))
					}
				}
			default:
				return nil, fmt.Errorf("%s: arpatch does not expand it", s[p.Pos().Offset():p.End().Offset()])
			}
		}
		out = append(out, b.String())
	}
	return out, nil
}

// unescape removes sh's backslashes: before any character outside
// quotes (only), or inside double quotes before one of special; a
// backslash-newline disappears.
func unescape(s, special string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (special == "" || strings.IndexByte(special, s[i+1]) >= 0) {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
