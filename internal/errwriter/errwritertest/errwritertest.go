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

// FailAt returns a writer that accepts n writes, then fails every one
// with ErrFull: FailAt(0) is a full disk (/dev/full).
func FailAt(n int) io.Writer { return &failAt{n: n} }

// EveryWriteFails renders once to count its writes (at least one), then
// once per write with a writer that fails at that write, and fails t
// unless each render returns an error that wraps ErrFull.
func EveryWriteFails(t *testing.T, render func(io.Writer) error) {
	t.Helper()
	SpreadWritesFail(t, render, 0)
}

// SpreadWritesFail is EveryWriteFails for a render of many writes: it
// fails k of them, spread evenly from the first to the last (every one
// when k is 0, or not less than the count; the first and last when k is
// 1 or 2), so that a render of hundreds of writes costs k+1 renders.
func SpreadWritesFail(t *testing.T, render func(io.Writer) error, k int) {
	t.Helper()
	count := &failAt{n: int(^uint(0) >> 1)}
	if err := render(count); err != nil {
		t.Fatalf("render to a working writer: %v", err)
	}
	if count.writes == 0 {
		t.Fatal("render wrote nothing")
	}
	at := make([]int, 0, count.writes)
	switch {
	case k <= 0 || k >= count.writes:
		for n := 0; n < count.writes; n++ {
			at = append(at, n)
		}
	default:
		k = max(k, 2)
		for i := 0; i < k; i++ {
			at = append(at, i*(count.writes-1)/(k-1))
		}
	}
	for _, n := range at {
		if err := render(&failAt{n: n}); !errors.Is(err, ErrFull) {
			t.Errorf("write %d of %d fails: render returned %v, want the writer's error", n+1, count.writes, err)
		}
	}
}
