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
	"math"
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
	n           int       // the count last set
	drawn       time.Time // when the bar was last drawn; zero before its first
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
		// The rate and ETA are the count's own, from the units done since
		// it began: the bar's would divide the units it was handed at its
		// start by the microseconds since (thousands a second at the
		// first request).
		c.n = n
		if n < total && !c.drawn.IsZero() && t.Sub(c.drawn) < barThrottle {
			return
		}
		c.draw(t)
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

// barThrottle is how often a bar is redrawn at most, besides its first
// and last counts.
const barThrottle = 100 * time.Millisecond

// draw redraws the bar at count c.n and time t: the description with the
// count's rate, then the count (the bar draws at each, unthrottled; Set
// throttles by Now, so that a test's clock drives it).
func (c *Counter) draw(t time.Time) {
	c.drawn = t
	c.bar.Describe(c.label + c.rate(c.n, t))
	_ = c.bar.Set(c.n) // only a write to the terminal can fail, and it is not worth stopping for
}

// rate is " (R UNIT/s, eta D)" for n done at t, from the units done since
// the count began over the time since; "" until a unit is done after a
// measurable interval (a rate from none, or from a zero interval, is no
// rate).
func (c *Counter) rate(n int, t time.Time) string {
	done, elapsed := n-c.startN, t.Sub(c.start)
	r, ok := Rate(done, elapsed)
	if !ok {
		return ""
	}
	unit := c.Unit
	if unit == "" {
		unit = "steps"
	}
	eta, _ := ETA(done, c.total-n, elapsed)
	digits := 0 // whole units a second from 100 up; else three significant digits
	if r < 100 {
		digits = max(0, 2-int(math.Floor(math.Log10(r))))
	}
	return fmt.Sprintf(" (%s %s/s, eta %s)", strconv.FormatFloat(r, 'f', digits, 64), unit, eta.Round(time.Second))
}

func (c *Counter) begin(label string, n, total int, t time.Time) {
	c.end(false)
	c.label, c.total, c.open = label, total, true
	c.start, c.startN, c.last, c.n, c.drawn = t, n, time.Time{}, n, time.Time{}
	if !c.TTY {
		return
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(c.W),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(false), // rate's, not the bar's
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(0), // Set throttles (barThrottle)
		progressbar.OptionFullWidth(),
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
	if c.bar.State().CurrentNum != int64(c.n) {
		// A count that Set's throttle did not draw yet: as it stands.
		now := time.Now
		if c.Now != nil {
			now = c.Now
		}
		c.draw(now())
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

// Rate is done units over elapsed, per second; ok is false until a unit
// is done over an interval above zero.
func Rate(done int, elapsed time.Duration) (float64, bool) {
	if done <= 0 || elapsed <= 0 {
		return 0, false
	}
	return float64(done) / elapsed.Seconds(), true
}

// ETA estimates the time left for remaining units from done units that
// took elapsed, assuming the same rate; ok is false until a unit is done
// over an interval above zero.
func ETA(done, remaining int, elapsed time.Duration) (time.Duration, bool) {
	if done <= 0 || elapsed <= 0 {
		return 0, false
	}
	return time.Duration(float64(elapsed) / float64(done) * float64(remaining)), true
}
