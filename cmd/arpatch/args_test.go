package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestInterspersed(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, c := range []struct{ in, want string }{
		{"arpatch history show 3 --db h.db", "arpatch history show --db h.db 3"},
		{"arpatch history show 3 --db=h.db", "arpatch history show --db=h.db 3"},
		{"arpatch history show --db h.db 3", "arpatch history show --db h.db 3"},
		{"arpatch recipes show pcie --help", "arpatch recipes show --help pcie"},
		{"arpatch patches check --repo m --commit main --json", "arpatch patches check --repo m --commit main --json"},
		// A bool flag takes no value: "x" stays positional.
		{"arpatch revert --dry-run x", "arpatch revert --dry-run x"},
		// After "--" nothing moves.
		{"arpatch history show -- 3 --db h.db", "arpatch history show -- 3 --db h.db"},
		{"arpatch history show 3 --bogus", "arpatch history show --bogus 3"},
		{"arpatch --version", "arpatch --version"},
		// A command that parses its own arguments gets them as they are.
		{"arpatch gencode-filter nvcc -O3 -c x.cu", "arpatch gencode-filter nvcc -O3 -c x.cu"},
		{"arpatch nosuch 3 --db x", "arpatch nosuch 3 --db x"},
	} {
		got := strings.Join(interspersed(app, strings.Fields(c.in)), " ")
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}
