//go:build unix

package gitsrc

import (
	"os"
	"syscall"
)

// readOnlyMap maps the file at path read-only, as git maps pack indexes:
// only the pages a lookup touches are read. The mapping lives as long as
// its packFile: releaseMap unmaps it when that is collected.
func readOnlyMap(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only; the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() == 0 {
		return nil, nil
	}
	return syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
}

// releaseMap unmaps what readOnlyMap mapped.
// It runs from a GC cleanup, which has nobody to report to, and Munmap
// fails only for a range that was never mapped.
func releaseMap(b []byte) { _ = syscall.Munmap(b) }
