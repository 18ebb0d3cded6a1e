// Package errwritertest checks that a renderer returns its writer's
// errors: whichever of its writes fails, the renderer must return that
// failure rather than a short file and nil.
package errwritertest

import (
	"errors"
	"io"
	"testing"
)

// ErrFull is the error the failing writer returns.
var ErrFull = errors.New("no space left on device (errwritertest)")

// failAt accepts n writes, then fails every one.
type failAt struct{ n, writes int }

func (f *failAt) Write(p []byte) (int, error) {
	f.writes++
	if f.writes > f.n {
		return 0, ErrFull
	}
	return len(p), nil
}

// EveryWriteFails renders once to count its writes (at least one), then
// once per write with a writer that fails at that write, and fails t
// unless each render returns an error that wraps ErrFull.
func EveryWriteFails(t *testing.T, render func(io.Writer) error) {
	t.Helper()
	count := &failAt{n: int(^uint(0) >> 1)}
	if err := render(count); err != nil {
		t.Fatalf("render to a working writer: %v", err)
	}
	if count.writes == 0 {
		t.Fatal("render wrote nothing")
	}
	for n := 0; n < count.writes; n++ {
		if err := render(&failAt{n: n}); !errors.Is(err, ErrFull) {
			t.Errorf("write %d of %d fails: render returned %v, want the writer's error", n+1, count.writes, err)
		}
	}
}
