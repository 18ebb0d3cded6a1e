package kernels

import (
	"io"
	"strconv"

	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/progress"
)

// Progress receives every line of a build's output.
type Progress interface {
	Line(line string)
	Done(ok bool)
}

var ninjaStep = lazyre.New(`^\s*\[(\d+)/(\d+)\]\s*(.*)$`)

// ParseNinjaStep reads ninja's "[n/m] description" status line; ok is
// false for any other line.
func ParseNinjaStep(line string) (n, m int, desc string, ok bool) {
	s := ninjaStep().FindStringSubmatch(line)
	if s == nil {
		return 0, 0, "", false
	}
	n, _ = strconv.Atoi(s[1])
	m, _ = strconv.Atoi(s[2])
	if m == 0 || n > m {
		return 0, 0, "", false
	}
	return n, m, s[3], true
}

// NewProgress returns the Progress a build shows on w: ninja's "[n/m]"
// steps as a live bar when w is a terminal, else a status line at most
// every 30 s ("sgl-kernel 120a [ 512/2048]  25% eta 41m"), through
// internal/progress. A new ninja run (CMake may run more than one)
// restarts the count.
func NewProgress(w io.Writer, label string) Progress {
	return &stepProgress{c: progress.New(w, ""), label: label}
}

type stepProgress struct {
	c     *progress.Counter
	label string
}

func (s *stepProgress) Line(line string) {
	if n, m, _, ok := ParseNinjaStep(line); ok {
		s.c.Set(s.label, n, m)
	}
}

func (s *stepProgress) Done(ok bool) { s.c.Done(ok) }
