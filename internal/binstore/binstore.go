// Package binstore keeps compiled helper programs (the gate judge's
// driver, kernelsim's driver) in a content-addressed directory: an entry
// is a directory named by the content that built it, holding the binary
// and its sha256 beside it (NAME.sha256). An entry is published whole,
// by renaming a scratch directory into place, so a reader sees either no
// entry or a complete one; a binary whose bytes no longer match its sum
// (a damaged or half-copied entry) is not trusted and is built again.
package binstore

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
)

// Verified reports whether bin exists and matches the sha256 recorded
// beside it in bin.sha256.
func Verified(bin string) bool {
	want, err := os.ReadFile(bin + ".sha256")
	if err != nil {
		return false
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return false
	}
	got := sha256.Sum256(b)
	return hex.EncodeToString(got[:]) == strings.TrimSpace(string(want))
}

// Seal writes bin's sha256 beside it, as Verified reads it.
func Seal(bin string) error {
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	return os.WriteFile(bin+".sha256", []byte(hex.EncodeToString(sum[:])+"\n"), 0o644)
}

// Publish renames the scratch directory dir, holding the sealed binary
// name, to entry, replacing a damaged entry of the same key whole. When
// the rename fails because another process published a verified entry
// first, that entry stands and Publish returns nil.
func Publish(dir, entry, name string) error {
	_ = os.RemoveAll(entry) // a damaged entry of the same key, replaced whole
	if err := os.Rename(dir, entry); err != nil && !Verified(filepath.Join(entry, name)) {
		return err
	}
	return nil
}
