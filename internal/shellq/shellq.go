// Package shellq quotes words for a POSIX shell, so that every command
// arpatch prints (remedies, plans, recorded commands) runs as printed
// when pasted. It is the one place that decides what needs quoting;
// mvdan.cc/sh's syntax.Quote makes that decision.
package shellq

import (
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
