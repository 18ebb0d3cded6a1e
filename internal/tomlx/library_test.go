package tomlx

import (
	"reflect"
	"testing"

	"github.com/BurntSushi/toml"
)

// Why tomlx is not BurntSushi/toml alone (docs/libraries.md): its
// MetaData gives the keys a decode did not use (Undecoded, which Strict
// uses) and ParseError gives a syntax or type error's line (which
// DecodeError uses), but no exported method gives the line of a key
// that decoded without error: its key positions are unexported
// (MetaData.keyInfo). So Strict's "file:line: unknown key" needs Line.
// The day a MetaData method returns a toml.Position, this test fails,
// and Line should go.
func TestMetaDataGivesNoKeyPosition(t *testing.T) {
	pos := reflect.TypeFor[toml.Position]()
	mt := reflect.TypeFor[*toml.MetaData]()
	for i := 0; i < mt.NumMethod(); i++ {
		m := mt.Method(i)
		for o := 0; o < m.Type.NumOut(); o++ {
			if out := m.Type.Out(o); out == pos || (out.Kind() == reflect.Map && out.Elem() == pos) || (out.Kind() == reflect.Slice && out.Elem() == pos) {
				t.Errorf("toml.MetaData.%s returns %s: use it for key lines instead of tomlx.Line", m.Name, out)
			}
		}
	}
	// What Strict gives instead: the unknown key of the second [[patch]],
	// at its line.
	var v struct {
		Name     string
		Upstream struct{ URL, Commit string }
		Patch    []struct{ File string }
	}
	md, err := toml.Decode(doc, &v)
	if err != nil {
		t.Fatal(err)
	}
	if err := Strict("f.toml", []byte(doc), md); err == nil || err.Error() != `f.toml:13: unknown key "patch.extra" (unknown keys: patch.extra)` {
		t.Errorf("Strict: %v", err)
	}
}
