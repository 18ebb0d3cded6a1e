// Package gosource walks the module's own non-test Go files, for the
// tests that hold the whole tree to a rule read off its source (the
// layers, the file and function sizes, the goroutines' start).
package gosource

import (
	"io/fs"
	"path/filepath"
	"strings"
)

// Walk calls fn for each non-test Go file under root, in lexical order,
// skipping the folders the go command skips (testdata, vendor, and names
// that begin with '.' or '_'). path is the file as WalkDir found it, rel
// the same relative to root with forward slashes. It returns the first
// error of the walk or of fn.
func Walk(root string, fn func(path, rel string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return fn(path, filepath.ToSlash(rel))
	})
}
