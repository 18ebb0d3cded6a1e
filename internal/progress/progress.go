// Package progress shows how far a long step is (a build's ninja steps, a
// bench trial's requests) on the user's stderr: a live bar when it is a
// terminal, a status line at most every interval otherwise (CI logs,
// files, pipes), where a bar's carriage returns would be noise. It owns
// the one terminal test arpatch makes.
//
// It is not a logger: what a step prints besides its count goes to the
// caller's own writer.
package progress

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// IsTerminal reports whether w is a terminal: an *os.File whose descriptor
// is a tty. Anything else (a buffer, a pipe, a regular file) is not.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// DefaultInterval is how often New's counter prints a status line when
// its writer is not a terminal.
const DefaultInterval = 30 * time.Second

// Counter shows a count towards a total, n of total units done of what
// a label names. A new label or total, or a count that starts again after
// it reached its total, begins a new count. It is safe for concurrent use.
type Counter struct {
	W        io.Writer
	TTY      bool          // draw a live bar (github.com/schollz/progressbar); else print lines
	Unit     string        // what is counted, plural ("requests"); "" for none
	Interval time.Duration // lines: at most one per Interval besides each count's first and last
	Now      func() time.Time

	mu          sync.Mutex
	label       string
	total       int
	open        bool // a count is shown and has not reached its total
	bar         *progressbar.ProgressBar
	start, last time.Time
	startN      int
}

// New returns a Counter on w that draws a bar when w is a terminal
// (IsTerminal) and prints a line every DefaultInterval otherwise.
func New(w io.Writer, unit string) *Counter {
	return &Counter{W: w, TTY: IsTerminal(w), Unit: unit, Interval: DefaultInterval}
}

// Set shows that n of total are done. A total of 0 or less shows nothing.
func (c *Counter) Set(label string, n, total int) {
	if total <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	t := now()
	if label != c.label || total != c.total || !c.open {
		c.begin(label, n, total, t)
	}
	if c.TTY {
		_ = c.bar.Set(n) // only a write to the terminal can fail, and it is not worth stopping for
		if n >= total {
			_ = c.bar.Finish()
			fmt.Fprintln(c.W)
			c.open = false
		}
		return
	}
	if n >= total {
		c.open = false
	} else if t.Sub(c.last) < c.Interval {
		return
	}
	c.last = t
	line := fmt.Sprintf("[%*d/%d]", len(strconv.Itoa(total)), n, total)
	if c.label != "" {
		line = c.label + " " + line
	}
	if c.Unit != "" {
		line += " " + c.Unit
	}
	line += fmt.Sprintf(" %3d%%", 100*n/total)
	if eta, ok := ETA(n-c.startN, total-n, t.Sub(c.start)); ok {
		line += " eta " + eta.Round(time.Second).String()
	}
	fmt.Fprintln(c.W, line)
}

func (c *Counter) begin(label string, n, total int, t time.Time) {
	c.end(false)
	c.label, c.total, c.open = label, total, true
	c.start, c.startN, c.last = t, n, time.Time{}
	if !c.TTY {
		return
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(c.W),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionFullWidth(),
	}
	if c.Unit != "" {
		opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString(c.Unit))
	}
	c.bar = progressbar.NewOptions(total, opts...)
}

// end closes a bar that has not reached its total: Finish when ok, else
// Exit (the bar stays as it was), then a newline.
func (c *Counter) end(ok bool) {
	if !c.TTY || !c.open || c.bar == nil {
		c.open = false
		return
	}
	if ok {
		_ = c.bar.Finish()
	} else {
		_ = c.bar.Exit()
	}
	fmt.Fprintln(c.W)
	c.open = false
}

// Done ends the display: a bar still open is finished (ok) or left where
// it stopped (failure), and the terminal gets its newline.
func (c *Counter) Done(ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.end(ok)
}

// ETA estimates the time left for remaining units from done units that
// took elapsed, assuming the same rate; ok is false until a unit is done.
func ETA(done, remaining int, elapsed time.Duration) (time.Duration, bool) {
	if done <= 0 {
		return 0, false
	}
	return time.Duration(float64(elapsed) / float64(done) * float64(remaining)), true
}
