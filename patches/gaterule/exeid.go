package gaterule

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// libDirs are where the loader finds a shared library besides the
// binary's own RPATH and RUNPATH: every same-named file in any of them is
// stamped, so the stamp need not know the loader's order.
var libDirs = []string{"/lib64", "/usr/lib64", "/lib/*-linux-gnu", "/usr/lib/*-linux-gnu", "/lib", "/usr/lib", "/usr/local/lib"}

// exeStamp names what an executable's answers about itself (python's
// sys.executable and sys.version, clang's --version) depend on, by stat:
// the path as named, the file it resolves to and each shared library it
// loads by name (where the version string may live: libpython,
// libclang-cpp), each by device, inode, size, mtime and ctime, and the
// loader's cache. A file replaced or rewritten gets a new inode, size or
// ctime, so a changed executable is never taken for the old one. It is
// "" (ask the executable) where stat cannot tell: a script (a version
// manager's shim answers by its environment and version files, not its
// bytes), $LD_LIBRARY_PATH or $LD_PRELOAD set, a library not found, or a
// file changed in the last two seconds (a rewrite within one clock tick
// could keep its times, as git's racily clean files).
func exeStamp(path string) string {
	if os.Getenv("LD_LIBRARY_PATH") != "" || os.Getenv("LD_PRELOAD") != "" {
		return ""
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00", path, real)
	if !stamp(&b, real) {
		return ""
	}
	f, err := elf.Open(real)
	if err != nil {
		return "" // not ELF: a script, or unreadable
	}
	defer func() { _ = f.Close() }() // read-only
	libs, err := f.ImportedLibraries()
	if err != nil {
		return ""
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RPATH, elf.DT_RUNPATH} {
		paths, _ := f.DynString(tag)
		for _, p := range paths {
			for _, d := range strings.Split(p, ":") {
				dirs = append(dirs, strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", filepath.Dir(real)), "$ORIGIN", filepath.Dir(real)))
			}
		}
	}
	for _, g := range libDirs {
		m, _ := filepath.Glob(g)
		dirs = append(dirs, m...)
	}
	for _, lib := range libs {
		found := false
		for _, d := range dirs {
			if p, err := filepath.EvalSymlinks(filepath.Join(d, lib)); err == nil {
				fmt.Fprintf(&b, "%s\x00", p)
				if !stamp(&b, p) {
					return ""
				}
				found = true
			}
		}
		if !found {
			return ""
		}
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil && !stamp(&b, "/etc/ld.so.cache") {
		return ""
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// stamp appends p's stat data to b; false when p cannot be stat'ed or
// changed too recently for its times to tell a later change.
func stamp(b *strings.Builder, p string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return false
	}
	now := time.Now()
	for _, t := range []syscall.Timespec{st.Mtim, st.Ctim} {
		if now.Sub(time.Unix(t.Sec, t.Nsec)) < 2*time.Second {
			return false
		}
	}
	fmt.Fprintf(b, "%d %d %d %d.%09d %d.%09d\x00", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	return true
}

// exeAnswer returns what ask says of the executable at path, kept in the
// judge's cache directory under its exeStamp (what = which question), so
// that a later process asks only while the stamp changes.
func exeAnswer(path, what string, ask func() (string, error)) (string, error) {
	s := exeStamp(path)
	if s == "" {
		return ask()
	}
	file := filepath.Join(cacheDir(), "exe-ids", what+"-"+s[:32])
	if b, err := os.ReadFile(file); err == nil && bytes.HasPrefix(b, []byte(s+"\n")) {
		return string(b[len(s)+1:]), nil
	}
	out, err := ask()
	if err != nil {
		return "", err
	}
	if os.MkdirAll(filepath.Dir(file), 0o755) == nil {
		tmp := fmt.Sprintf("%s.%d.tmp", file, os.Getpid())
		if os.WriteFile(tmp, []byte(s+"\n"+out), 0o644) == nil {
			_ = os.Rename(tmp, file) // a cache: a failed write asks again next time
		}
	}
	return out, nil
}
