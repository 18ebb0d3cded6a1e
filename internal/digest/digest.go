// Package digest is the one spelling of a content hash in arpatch: the
// lower-case hex SHA-256 of some bytes, as series.toml pins a patch, a
// state file records a file, a build key names a cache entry and a
// manifest lists an output. It does not read files.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
)

// SHA256Hex returns the SHA-256 of b as 64 lower-case hex digits.
func SHA256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
