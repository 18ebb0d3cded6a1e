// Package textfmt holds the few wording helpers that messages and reports
// across arpatch share: a list of integers ("1,4,16", a concurrency list,
// GPU indexes, line numbers), a count with its noun ("1 object",
// "2 objects"), and the first or last line of a tool's output. A value that is empty prints as cmp.Or(s, "(none)") at the
// call site: the placeholder differs by place and needs no helper.
package textfmt

import (
	"strconv"
	"strings"
)

// Ints joins xs in decimal with sep: Ints([]int{1, 4, 16}, ",") is
// "1,4,16"; no integers give "".
func Ints(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, sep)
}

// Plural is n and the noun that fits it: "1 object", "2 objects",
// "0 objects".
func Plural(n int, one, many string) string {
	return strconv.Itoa(n) + " " + Word(n, one, many)
}

// Word is one when n is 1, else many: the verb or noun that agrees with n.
func Word(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// FirstLine returns the first line of s with s's leading and the line's
// trailing white space trimmed: a tool's version banner, an error's
// headline.
func FirstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l)
}

// LastLine returns the last line of s with s's trailing and the line's
// leading white space trimmed: what a command printed last.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.TrimSpace(s[strings.LastIndexByte(s, '\n')+1:])
}

// List joins the first n of xs with ", ", and says how many more there
// are: List([]string{"a", "b", "c"}, 2) is "a, b and 1 more".
func List(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + " and " + strconv.Itoa(len(xs)-n) + " more"
}
