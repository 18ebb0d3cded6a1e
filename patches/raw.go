package patches

import (
	"fmt"
	"io/fs"
	"path"

	"github.com/arpatch/arpatch/internal/digest"
)

// ReadPatch returns the bytes of one patch file of the series, checked
// against the sha256 series.toml records. It returns a *TamperError when
// they differ and an error naming the series for a file it does not list.
func (s *Series) ReadPatch(file string) ([]byte, error) {
	for _, e := range s.Patches {
		if e.File != file {
			continue
		}
		data, err := fs.ReadFile(s.fsys, path.Join(s.root, e.File))
		if err != nil {
			return nil, fmt.Errorf("series %s: %w", s.Name, err)
		}
		if got := digest.SHA256Hex(data); got != e.SHA256 {
			return nil, &TamperError{Series: s.Dir, Patch: e.File, Want: e.SHA256, Got: got}
		}
		return data, nil
	}
	return nil, fmt.Errorf("series %s lists no patch %s", s.Name, file)
}

// SplitHeader returns a patch file's text before its first diff line (the
// DEP-3 header, with any blank lines after it) and the diff itself.
func SplitHeader(data []byte) (header, body []byte) {
	header, body, _ = splitHeader(data)
	return header, body
}

// SplitLines splits content into lines that keep their newline (and any
// CR before it); the last has none when the content does not end in one.
// Joining them gives the content back byte for byte.
func SplitLines(content []byte) []string { return splitLines(content) }
