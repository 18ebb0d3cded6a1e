// Package envfile reads and writes the env files arpatch writes for other
// programs to load: KEY=VALUE lines that a POSIX shell reads with
// `set -a; . ./FILE; set +a` (dash, bash), that systemd reads as an
// EnvironmentFile and docker as an --env-file.
//
// Those readers agree only on a small subset of what each accepts, and a
// line they read differently is a line where arpatch would check one thing
// and a shell would run another (a vertical tab before `#; touch X` is no
// comment to sh: the `touch` runs). So Parse accepts only lines that every
// one of them reads alike, and refuses the rest by line and cause:
//
//   - a blank line: nothing but spaces and tabs (the only blanks of sh);
//   - a comment: optional spaces and tabs, then '#', then any text that
//     does not end in '\' (systemd continues a comment whose last byte is
//     a backslash onto the next line; sh does not);
//   - an assignment: optional spaces and tabs, a name
//     ([A-Za-z_][A-Za-z0-9_]*), '=', and a value of ASCII letters,
//     digits and "_,.:/+-@%=" only, which no reader quotes, escapes,
//     expands, splits or trims (docker would keep quotes and a trailing
//     blank that sh drops; sh would run `$(...)`, `;`, `&&`, a here-doc).
//
// Anywhere in the file it refuses a NUL byte, a line ending in CR (CRLF),
// any other control character but the tab, a byte-order mark, invisible
// format characters (bidi overrides, zero-width spaces: what a reader of
// the file would not see) and bytes that are not UTF-8.
//
// It is not a parser of shell: a file it accepts is one whose meaning does
// not depend on which reader reads it. The package's tests load every
// accepted input with a real sh and bash and compare.
package envfile

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/arpatch/arpatch/internal/shellq"
)

// ValueChars are the bytes, besides ASCII letters and digits, that a
// value may hold.
const ValueChars = "_,.:/+-@%="

// Line is one line of an env file.
type Line struct {
	N int // 1-based line number
	// Key and Value are an assignment's; Key is "" on a comment or a
	// blank line.
	Key, Value string
	// Comment is a comment line's text after the '#', as written.
	Comment string
	// IsComment reports a comment line (Comment may be "").
	IsComment bool
}

// LineError is a line Parse refuses: Line is its number, Reason what is
// wrong, without the file's name (the caller names the file and the
// remedy). CRLF reports a line that ends in "\r\n", whose remedy differs.
type LineError struct {
	Line   int
	Reason string
	CRLF   bool
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Parse splits data into lines and checks each by the package's rule.
// The text after a final newline is no line. It returns a *LineError for
// the first line refused.
func Parse(data []byte) ([]Line, error) {
	text := string(data)
	text = strings.TrimSuffix(text, "\n")
	if text == "" {
		return nil, nil
	}
	// Split by hand: bufio.ScanLines would drop each line's \r unseen.
	raws := strings.Split(text, "\n")
	lines := make([]Line, 0, len(raws))
	for i, raw := range raws {
		l, err := parseLine(i+1, raw)
		if err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, nil
}

func parseLine(n int, raw string) (Line, error) {
	fail := func(format string, a ...any) (Line, error) {
		return Line{}, &LineError{Line: n, Reason: fmt.Sprintf(format, a...)}
	}
	if strings.HasSuffix(raw, "\r") {
		return Line{}, &LineError{Line: n, CRLF: true, Reason: "the line ends in CRLF (\\r\\n): a shell would keep the \\r in the line"}
	}
	if n == 1 && strings.HasPrefix(raw, "\ufeff") {
		return fail("the file starts with a byte-order mark (U+FEFF), which a shell reads as part of the first word")
	}
	for col, r := range raw {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(raw[col:], "\ufffd"):
			return fail("byte %d is not UTF-8 (0x%02x)", col+1, raw[col])
		case r == '\t':
		case r == 0:
			return fail("byte %d is a NUL byte, which a shell drops, joining what follows to the line", col+1)
		case unicode.IsControl(r):
			return fail("byte %d is the control character %s, which a shell reads as part of a word", col+1, strconv.QuoteRune(r))
		case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			return fail("byte %d is the invisible character %U, which a reader of the file would not see", col+1, r)
		}
	}
	body := strings.TrimLeft(raw, " \t")
	switch {
	case body == "":
		return Line{N: n}, nil
	case body[0] == '#':
		if strings.HasSuffix(body, `\`) {
			return fail("the comment ends in '\\', which systemd reads as continuing the comment onto the next line and a shell does not")
		}
		return Line{N: n, IsComment: true, Comment: body[1:]}, nil
	}
	k, v, ok := strings.Cut(body, "=")
	if !ok || !validName(k) {
		if c, _ := utf8.DecodeRuneInString(body); c != ' ' && unicode.IsSpace(c) {
			return fail("the line starts with %U, which is no blank to a shell: it is neither a comment nor KEY=VALUE", c)
		}
		return fail("%s is neither a comment nor KEY=VALUE (a name of letters, digits and _, then =)", strconv.Quote(body))
	}
	if err := CheckValue(v); err != nil {
		return fail("%s: %v", k, err)
	}
	return Line{N: n, Key: k, Value: v}, nil
}

func validName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// CheckValue reports whether v can be written as a value that every reader
// takes literally: ASCII letters, digits and ValueChars. The error names
// the first byte that cannot.
func CheckValue(v string) error {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(ValueChars, c) >= 0 {
			continue
		}
		r, _ := utf8.DecodeRuneInString(v[i:])
		return fmt.Errorf("the value %s holds %s at byte %d, which a shell or another reader does not take literally (a value is ASCII letters, digits and %s)",
			strconv.Quote(v), strconv.QuoteRune(r), i+1, ValueChars)
	}
	return nil
}

// Source returns the command that loads the env file at path into a POSIX
// shell and exports its variables: `set -a; . ./tune.env; set +a`. A path
// without a slash gets "./", since `.` looks a bare name up in PATH (dash
// and bash --posix do not read the current directory), and the path is
// quoted by shellq.Path.
func Source(path string) string {
	if !strings.Contains(path, "/") {
		path = "./" + path
	}
	return "set -a; . " + shellq.Path(path) + "; set +a"
}

// Assign returns the line "KEY=VALUE", or an error when key is no name or
// value fails CheckValue.
func Assign(key, value string) (string, error) {
	if !validName(key) {
		return "", fmt.Errorf("%s is not a variable name (letters, digits and _, not starting with a digit)", strconv.Quote(key))
	}
	if err := CheckValue(value); err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return key + "=" + value, nil
}

// Comment returns "# " + CommentText(text): one comment line that Parse
// accepts, whatever text holds.
func Comment(text string) string { return "# " + CommentText(text) }

// CommentText returns text as it can stand in a comment line: itself, or,
// when it holds anything Parse refuses in a comment (a newline, another
// control character, a format character, a final '\', bytes that are not
// UTF-8) or starts with '"', its Go string literal (strconv.Quote), so
// that it stays on its line and is seen. UnquoteText reads it back.
func CommentText(text string) string {
	if _, err := parseLine(2, "# "+text); err != nil || strings.HasPrefix(text, `"`) {
		return strconv.Quote(text)
	}
	return text
}

// UnquoteText is CommentText's inverse: s unquoted when it is a Go string
// literal, else s itself.
func UnquoteText(s string) string {
	if strings.HasPrefix(s, `"`) {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}
