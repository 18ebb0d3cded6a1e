//go:build !unix

package gitsrc

import "os"

// readOnlyMap reads the file at path whole where mmap is not at hand.
func readOnlyMap(path string) ([]byte, error) { return os.ReadFile(path) }

func releaseMap([]byte) {}
