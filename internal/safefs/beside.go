package safefs

import (
	"os"
	"path/filepath"
	"strings"
)

// Beside is a path in path's directory that is not path: its name with
// "-"+tag before the extension ("p2p.json", "new" gives "p2p-new.json";
// "tune.env" gives "tune-new.env"; "log" gives "log-new"). A remedy that
// writes a file names Beside of the file the user gave, so that it never
// writes over what the user's command read.
func Beside(path, tag string) string {
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	if ext == base { // ".env": a name that is all extension
		ext = ""
	}
	return dir + strings.TrimSuffix(base, ext) + "-" + tag + ext
}

// SamePath reports whether a and b name one file: the same path once
// made absolute and clean, or, where both exist, the same file
// (os.SameFile: a link, another spelling).
func SamePath(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if x, err1 := filepath.Abs(a); err1 == nil {
		if y, err2 := filepath.Abs(b); err2 == nil && x == y {
			return true
		}
	}
	return sameFile(a, b)
}

func sameFile(a, b string) bool {
	x, err1 := os.Stat(a)
	y, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(x, y)
}
