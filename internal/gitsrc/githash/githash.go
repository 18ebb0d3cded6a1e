// Package githash is arpatch's one notion of a git commit name: a full
// hash is 40 lower-case hex digits (SHA-1, git's default object format,
// the one SGLang's history uses), an abbreviated one is a shorter hex
// prefix, and messages print the first 12 digits. It does not read
// repositories (internal/gitsrc does) and knows nothing of refs.
package githash

import (
	"fmt"
	"strings"

	"github.com/arpatch/arpatch/internal/shellq"
)

// FullLen is the number of hex digits in a full SHA-1 commit hash.
const FullLen = 40

// ShortLen is the number of hex digits messages print of a hash: 12, more
// than git's default 7, so a short name stays unique in a large history.
const ShortLen = 12

// minAbbrev is git's shortest abbreviation (core.abbrev's minimum).
const minAbbrev = 4

// Hash is a commit name in hex as read from a recipe, a series, a state
// file or a repository; it may be full, abbreviated or wrong: Parse and
// IsFull say which.
type Hash string

// Parse returns s as a full Hash, or an error that says what is wrong
// with it (empty, upper case, a non-hex character and where, or how many
// digits it has against the 40 needed) and, for a non-empty s, the git
// command that prints the full hash in a clone that has the commit.
func Parse(s string) (Hash, error) {
	h := Hash(s)
	if h.IsFull() {
		return h, nil
	}
	if s == "" {
		return "", fmt.Errorf("the commit is empty; pin a full 40-hex commit hash")
	}
	return "", fmt.Errorf("%q is not a full 40-hex commit hash: %s; in a clone of the repository, `%s` prints the full one", s, h.problem(), shellq.Join([]string{"git", "rev-parse", s + "^{commit}"}))
}

// problem says why h is not a full hash.
func (h Hash) problem() string {
	s := string(h)
	for i, c := range s {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			return fmt.Sprintf("it has upper case (%q at position %d); hashes are written in lower case", c, i+1)
		default:
			return fmt.Sprintf("%q at position %d is not a hex digit; branch and tag names are not pins", c, i+1)
		}
	}
	if len(s) < FullLen {
		return fmt.Sprintf("it has %d hex digits, not %d: an abbreviated hash can match several commits", len(s), FullLen)
	}
	return fmt.Sprintf("it has %d hex digits, not %d", len(s), FullLen)
}

// IsFull reports whether h is exactly 40 lower-case hex digits.
func (h Hash) IsFull() bool {
	if len(h) != FullLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// IsAbbreviated reports whether h looks like an abbreviated hash: 4 to 39
// hex digits in either case, as git accepts on the command line.
func (h Hash) IsAbbreviated() bool {
	if len(h) < minAbbrev || len(h) >= FullLen {
		return false
	}
	return strings.Trim(strings.ToLower(string(h)), "0123456789abcdef") == ""
}

// Short returns the first 12 characters of h, or h itself when it is
// shorter: what messages print of a commit.
func (h Hash) Short() string {
	if len(h) > ShortLen {
		return string(h[:ShortLen])
	}
	return string(h)
}

// String returns h as it is.
func (h Hash) String() string { return string(h) }

// Shorts returns Short of each hash, joined by ", ".
func Shorts(hs []string) string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = Hash(h).Short()
	}
	return strings.Join(out, ", ")
}
