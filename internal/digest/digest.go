// Package digest is the one spelling of a content hash in arpatch: the
// lower-case hex SHA-256 of some bytes, as series.toml pins a patch, a
// state file records a file, a build key names a cache entry and a
// manifest lists an output. It does not read files.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// SHA256Hex returns the SHA-256 of b as 64 lower-case hex digits.
func SHA256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// IsSHA256Hex reports whether s is a SHA-256 as SHA256Hex writes it: 64
// lower-case hex digits.
func IsSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ShortLen is how many hex digits of a digest messages and names print:
// 12, as many as of a commit (githash.ShortLen).
const ShortLen = 12

// Short returns d with its hex cut to 12 digits, keeping a prefix such as
// "sha256:" or "SHA256=" (CMake's URL_HASH): "sha256:09237099f3a1".
// A shorter d is returned as it is.
func Short(d string) string {
	i := strings.LastIndexAny(d, ":=") + 1
	if len(d)-i > ShortLen {
		return d[:i+ShortLen]
	}
	return d
}
