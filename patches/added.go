package patches

import (
	"fmt"
	"path/filepath"
	"strings"
)

// AddedLines returns, as one string, the new-side lines of the first hunk
// of ps changing file that holds a line containing from: from that line up
// to the first later line equal to end (end's line included when
// inclusive). It is how the series' own added code is read out of a
// series (to run it on the host: patches/seriessim, patches/kernelsim);
// it returns an error naming from, end and file when no hunk holds them.
func AddedLines(ps []*Patch, file, from, end string, inclusive bool) (string, error) {
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			if fc.Path != file {
				continue
			}
			for _, h := range fc.Hunks {
				start := -1
				for i, l := range h.New {
					if start < 0 && strings.Contains(l, from) {
						start = i
					}
					if start >= 0 && i > start && strings.TrimRight(l, "\n") == end {
						if inclusive {
							i++
						}
						return strings.Join(h.New[start:i], ""), nil
					}
				}
			}
		}
	}
	return "", fmt.Errorf("no hunk adds %q ... %q to %s", from, end, file)
}

// GuardedBlock returns, as one string, the new-side lines of ps's file
// named base (custom_all_reduce.cuh, in whichever directory the era keeps
// it) from the `#ifndef USE_MUSA` line before the first line containing
// marker to the `#endif` that closes it, inclusive; or an error naming
// base and marker.
func GuardedBlock(ps []*Patch, base, marker string) (string, error) {
	for _, p := range ps {
		for _, fc := range p.Diff.Changes {
			if filepath.Base(fc.Path) != base {
				continue
			}
			for _, h := range fc.Hunks {
				for i, l := range h.New {
					if !strings.Contains(l, marker) {
						continue
					}
					start := i
					for start > 0 && strings.TrimSpace(h.New[start]) != "#ifndef USE_MUSA" {
						start--
					}
					depth := 0
					for end := start; end < len(h.New); end++ {
						switch d := strings.TrimSpace(h.New[end]); {
						case strings.HasPrefix(d, "#if"):
							depth++
						case strings.HasPrefix(d, "#endif"):
							if depth--; depth == 0 {
								return strings.Join(h.New[start:end+1], ""), nil
							}
						}
					}
				}
			}
		}
	}
	return "", fmt.Errorf("no hunk of %s adds a guarded block with %q", base, marker)
}
