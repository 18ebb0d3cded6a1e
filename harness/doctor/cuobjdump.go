package doctor

import (
	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/lazyre"
)

var elfRe = lazyre.New(`sm_(` + cudaarch.Pattern + `)\.cubin`)

// ParseListELF reads `cuobjdump --list-elf FILE` ("ELF file 1:
// common_ops.1.sm_90a.cubin") and returns the archs, unique, in order.
func ParseListELF(out string) []string {
	seen := map[string]bool{}
	var archs []string
	for _, m := range elfRe().FindAllStringSubmatch(out, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			archs = append(archs, m[1])
		}
	}
	return archs
}
