package tomlx

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

const doc = `name = "x"
# comment = "not a key"

[upstream]
url = "u"
  commit = "c"

[[patch]]
file = "a"

[[patch]]
file = "b"
extra = 1
`

func TestLine(t *testing.T) {
	for key, want := range map[string]int{
		"name":            1,
		"upstream":        4,
		"upstream.url":    5,
		"upstream.commit": 6,
		"patch.file":      9,
		"patch.extra":     13,
		"comment":         0,
		"missing.key":     0,
		"upstream.nope":   4,
	} {
		if got := Line([]byte(doc), key); got != want {
			t.Errorf("Line(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestStrictAndDecodeError(t *testing.T) {
	var v struct {
		Name  string
		Patch []struct{ File string }
	}
	md, err := toml.Decode(doc, &v)
	if err != nil {
		t.Fatal(err)
	}
	err = Strict("f.toml", []byte(doc), md)
	if err == nil || !strings.HasPrefix(err.Error(), `f.toml:4: unknown key "upstream"`) || !strings.Contains(err.Error(), "patch.extra") {
		t.Errorf("Strict: %v", err)
	}
	_, err = toml.Decode("a = \nb = 1\n", &v)
	if err := DecodeError("f.toml", err); !strings.HasPrefix(err.Error(), "f.toml:1: ") {
		t.Errorf("DecodeError: %v", err)
	}
}
