package safefs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBesideAndSamePath(t *testing.T) {
	for in, want := range map[string]string{"p2p.json": "p2p-new.json", "dir/tune.env": "dir/tune-new.env", "log": "log-new", ".env": ".env-new", "a.b/c": "a.b/c-new", "x.tar.gz": "x.tar-new.gz"} {
		if got := Beside(in, "new"); got != want || got == in {
			t.Errorf("Beside(%q) = %q, want %q", in, got, want)
		}
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "a.json")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f, filepath.Join(dir, "l.json")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{f, f, true}, {f, filepath.Join(dir, ".", "a.json"), true}, {f, filepath.Join(dir, "l.json"), true},
		{f, filepath.Join(dir, "b.json"), false}, {f, "", false}, {"x/new", "x/new", true},
	} {
		if got := SamePath(c.a, c.b); got != c.same {
			t.Errorf("SamePath(%q, %q) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}
