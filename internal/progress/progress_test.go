package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // nothing is written to it
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }() // nothing is written to the pipe
	defer func() { _ = w.Close() }()
	for name, x := range map[string]interface{ Write([]byte) (int, error) }{"buffer": &bytes.Buffer{}, "file": f, "pipe": w} {
		if IsTerminal(x) {
			t.Errorf("%s is a terminal", name)
		}
		if New(x, "").TTY {
			t.Errorf("New(%s) draws a bar", name)
		}
	}
	// The master side of a pseudo-terminal answers the terminal ioctl.
	pt, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to test the positive case: %v", err)
	}
	defer func() { _ = pt.Close() }()
	if !IsTerminal(pt) || !New(pt, "").TTY {
		t.Error("a pseudo-terminal is not a terminal")
	}
}

func TestLines(t *testing.T) {
	var b bytes.Buffer
	now := time.Unix(0, 0)
	c := &Counter{W: &b, Interval: 10 * time.Second, Now: func() time.Time { return now }}
	for i := 1; i <= 100; i++ {
		now = now.Add(time.Second)
		c.Set("sgl-kernel 120a", i, 100)
	}
	c.Done(true)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// A line at the first step, then one every 10 s, and the last step.
	if len(lines) != 11 || lines[0] != "sgl-kernel 120a [  1/100]   1%" || lines[len(lines)-1] != "sgl-kernel 120a [100/100] 100% eta 0s" {
		t.Errorf("lines = %q", lines)
	}
	if lines[1] != "sgl-kernel 120a [ 11/100]  11% eta 1m29s" {
		t.Errorf("second line %q, want an ETA of 89 steps at 1 s each", lines[1])
	}
}

// TestNewCount: a new label, a new total or a count that starts again
// after its total begins a new count, with its own first line and ETA.
func TestNewCount(t *testing.T) {
	var b bytes.Buffer
	now := time.Unix(0, 0)
	c := &Counter{W: &b, Unit: "requests", Interval: time.Hour, Now: func() time.Time { return now }}
	for _, label := range []string{"trial 1/2 pcie concurrency 4", "trial 2/2 pcie concurrency 4"} {
		for i := 1; i <= 4; i++ {
			now = now.Add(time.Second)
			c.Set(label, i, 4)
		}
	}
	now = now.Add(time.Second)
	c.Set("trial 2/2 pcie concurrency 4", 1, 4) // the same label again, from the start
	c.Set("trial 2/2 pcie concurrency 4", 1, 8) // another total
	c.Set("x", 0, 0)                            // no total: nothing
	want := []string{
		"trial 1/2 pcie concurrency 4 [1/4] requests  25%",
		"trial 1/2 pcie concurrency 4 [4/4] requests 100% eta 0s",
		"trial 2/2 pcie concurrency 4 [1/4] requests  25%",
		"trial 2/2 pcie concurrency 4 [4/4] requests 100% eta 0s",
		"trial 2/2 pcie concurrency 4 [1/4] requests  25%",
		"trial 2/2 pcie concurrency 4 [1/8] requests  12%",
	}
	if got := strings.Split(strings.TrimSpace(b.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBar: on a terminal each count is a bar that ends with a newline when
// it reaches its total, or when Done closes it early.
func TestBar(t *testing.T) {
	var b bytes.Buffer
	c := &Counter{W: &b, TTY: true, Unit: "requests"}
	for i := 1; i <= 3; i++ {
		c.Set("trial 1/1 pcie concurrency 2", i, 3)
	}
	out := b.String()
	if !strings.Contains(out, "trial 1/1 pcie concurrency 2") || !strings.Contains(out, "(3/3") || !strings.Contains(out, "\r") || !strings.HasSuffix(out, "\n") {
		t.Errorf("finished bar = %q", out)
	}
	b.Reset()
	c.Set("sgl-kernel 120a", 2, 10)
	if strings.HasSuffix(b.String(), "\n") {
		t.Errorf("a bar in progress ended its line: %q", b.String())
	}
	c.Done(false)
	if out := b.String(); !strings.Contains(out, "(2/10") || !strings.HasSuffix(out, "\n") {
		t.Errorf("interrupted bar = %q", out)
	}
	b.Reset()
	c.Done(false)
	if b.Len() != 0 {
		t.Errorf("a second Done wrote %q", b.String())
	}
}

// TestBarRate: a bar's rate and ETA are from the units done since its
// count began, shown once one is done after a measurable interval: none
// at the first unit (the bar's own divided it by microseconds, "22688
// requests/s"), then the count's.
func TestBarRate(t *testing.T) {
	var b bytes.Buffer
	now := time.Unix(0, 0)
	c := &Counter{W: &b, TTY: true, Unit: "requests", Now: func() time.Time { return now }}
	c.Set("trial 1/1 pcie concurrency 2", 1, 300)
	if out := b.String(); !strings.Contains(out, "(1/300)") || strings.Contains(out, "/s") || strings.Contains(out, "eta") || strings.Contains(out, ":") {
		t.Errorf("first unit: %q, want no rate and no ETA", out)
	}
	now = now.Add(2 * time.Second)
	c.Set("trial 1/1 pcie concurrency 2", 5, 300) // 4 more in 2 s
	c.Done(false)
	if out := b.String(); !strings.Contains(out, "trial 1/1 pcie concurrency 2 (2.00 requests/s, eta 2m28s)") {
		t.Errorf("after 4 units in 2 s: %q, want 2 requests/s and 295 left at that rate", out)
	}
	if strings.Contains(b.String(), "Inf") || strings.Contains(b.String(), "NaN") {
		t.Errorf("bar: %q", b.String())
	}
	for _, x := range []struct {
		done    int
		elapsed time.Duration
		want    float64
		ok      bool
	}{{0, time.Second, 0, false}, {3, 0, 0, false}, {3, 1500 * time.Millisecond, 2, true}} {
		if r, ok := Rate(x.done, x.elapsed); r != x.want || ok != x.ok {
			t.Errorf("Rate(%d, %s) = %v, %v; want %v, %v", x.done, x.elapsed, r, ok, x.want, x.ok)
		}
	}
}

func TestETA(t *testing.T) {
	for _, c := range []struct {
		done, remaining int
		elapsed, want   time.Duration
		ok              bool
	}{{0, 10, time.Minute, 0, false}, {2, 10, 0, 0, false}, {1, 3, time.Second, 3 * time.Second, true}, {10, 0, time.Hour, 0, true}, {4, 6, 2 * time.Second, 3 * time.Second, true}} {
		got, ok := ETA(c.done, c.remaining, c.elapsed)
		if got != c.want || ok != c.ok {
			t.Errorf("ETA(%d, %d, %s) = %s, %v; want %s, %v", c.done, c.remaining, c.elapsed, got, ok, c.want, c.ok)
		}
	}
}
