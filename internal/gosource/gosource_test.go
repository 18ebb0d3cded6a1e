package gosource

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWalk(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"a.go", "a_test.go", "b/b.go", "b/x.txt", "testdata/t.go", "vendor/v.go", ".git/g.go", "_old/o.go", "c/d/e.go"} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	err := Walk(root, func(path, rel string) error {
		if path != filepath.Join(root, filepath.FromSlash(rel)) {
			t.Errorf("path %s, rel %s", path, rel)
		}
		got = append(got, rel)
		return nil
	})
	if want := []string{"a.go", "b/b.go", "c/d/e.go"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Walk = %v, %v; want %v", got, err, want)
	}
}
