// Package tomlx adds what arpatch's config files need on top of
// github.com/BurntSushi/toml: unknown keys as errors, and the line of a key
// for messages. It is not a TOML parser.
package tomlx

import (
	"errors"
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/arpatch/arpatch/internal/lazyre"
)

// DecodeError turns a toml decode error into one that starts with
// "file:line:".
func DecodeError(file string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s:%d: %s", file, pe.Position.Line, pe.Message)
	}
	// Type mismatches come as `toml: line N (last key "k"): message`.
	if m := typeErr().FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s:%s: %s: %s", file, m[1], m[2], m[3])
	}
	return fmt.Errorf("%s: %w", file, err)
}

var typeErr = lazyre.New(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// Strict returns an error for the first key in data that decoding did not
// use, naming the file, the line and the key.
func Strict(file string, data []byte, md toml.MetaData) error {
	und := md.Undecoded()
	if len(und) == 0 {
		return nil
	}
	var keys []string
	for _, k := range und {
		keys = append(keys, k.String())
	}
	k := und[0].String()
	return fmt.Errorf("%s:%d: unknown key %q (unknown keys: %s)", file, Line(data, k), k, strings.Join(keys, ", "))
}

// Line returns the 1-based line where the dotted key is set in data; for a
// key that is not set, the line of the table it belongs in; 0 when neither
// is found. It understands
// [table], [[array]] headers and bare "key =" lines, which is all arpatch's
// files use.
func Line(data []byte, dotted string) int {
	table := ""
	tableLine, parentLine := 0, 0
	parent := ""
	if i := strings.LastIndex(dotted, "."); i >= 0 {
		parent = dotted[:i]
	}
	for i, raw := range strings.Split(string(data), "\n") {
		l := strings.TrimSpace(raw)
		if strings.HasPrefix(l, "[") {
			name := strings.Trim(l, "[] \t")
			if j := strings.Index(name, "#"); j >= 0 {
				name = strings.TrimSpace(strings.Trim(name[:j], "[] \t"))
			}
			table = name
			if table == dotted && tableLine == 0 {
				tableLine = i + 1
			}
			if table == parent && parentLine == 0 {
				parentLine = i + 1
			}
			continue
		}
		k, _, ok := strings.Cut(l, "=")
		if !ok || strings.HasPrefix(l, "#") {
			continue
		}
		k = strings.Trim(strings.TrimSpace(k), `"`)
		full := k
		if table != "" {
			full = table + "." + k
		}
		if full == dotted {
			return i + 1
		}
	}
	if tableLine == 0 {
		return parentLine
	}
	return tableLine
}
