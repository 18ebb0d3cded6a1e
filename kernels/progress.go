package kernels

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Progress receives every line of a build's output.
type Progress interface {
	Line(line string)
	Done(ok bool)
}

var ninjaStep = regexp.MustCompile(`^\s*\[(\d+)/(\d+)\]\s*(.*)$`)

// ParseNinjaStep reads ninja's "[n/m] description" status line; ok is
// false for any other line.
func ParseNinjaStep(line string) (n, m int, desc string, ok bool) {
	s := ninjaStep.FindStringSubmatch(line)
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

// BarProgress draws a live bar with count and ETA from ninja's "[n/m]"
// lines (github.com/schollz/progressbar).
type BarProgress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
	max int
}

// NewBarProgress returns a Progress that draws on w, a terminal.
func NewBarProgress(w io.Writer, label string) *BarProgress {
	return &BarProgress{w: w, bar: progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionFullWidth(),
	)}
}

func (b *BarProgress) Line(line string) {
	n, m, _, ok := ParseNinjaStep(line)
	if !ok {
		return
	}
	if m != b.max {
		// A new ninja run (CMake may run more than one) restarts the count.
		b.max = m
		b.bar.ChangeMax(m)
		b.bar.Reset()
	}
	b.bar.Set(n)
}

func (b *BarProgress) Done(ok bool) {
	if ok {
		b.bar.Finish()
	} else {
		b.bar.Exit()
	}
	fmt.Fprintln(b.w)
}

// LineProgress prints a status line at most every interval, for logs and
// CI where a bar would be noise: "[ 512/2048] 25% eta 41m".
type LineProgress struct {
	W        io.Writer
	Interval time.Duration
	Now      func() time.Time

	start, last time.Time
	startN      int
	max         int
}

func (l *LineProgress) Line(line string) {
	n, m, _, ok := ParseNinjaStep(line)
	if !ok {
		return
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	t := now()
	if m != l.max || l.start.IsZero() {
		l.max, l.start, l.startN = m, t, n
	}
	if t.Sub(l.last) < l.Interval && n != m {
		return
	}
	l.last = t
	fmt.Fprintf(l.W, "[%*d/%d] %3d%%", len(strconv.Itoa(m)), n, m, 100*n/m)
	if eta, ok := ETA(n-l.startN, m-n, t.Sub(l.start)); ok {
		fmt.Fprintf(l.W, " eta %s", eta.Round(time.Second))
	}
	fmt.Fprintln(l.W)
}

func (l *LineProgress) Done(bool) {}

// ETA estimates the time left for remaining steps from done steps taking
// elapsed, assuming the same rate; ok is false until a step is done.
func ETA(done, remaining int, elapsed time.Duration) (time.Duration, bool) {
	if done <= 0 {
		return 0, false
	}
	return time.Duration(float64(elapsed) / float64(done) * float64(remaining)), true
}
