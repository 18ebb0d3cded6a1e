package errwriter

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

// failAfter accepts n writes, then fails every one.
type failAfter struct {
	n   int
	buf bytes.Buffer
}

var errFull = errors.New("no space left on device")

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errFull
	}
	f.n--
	return f.buf.Write(p)
}

// The first error sticks: later writes reach nothing, Err reports it.
func TestWriterKeepsTheFirstError(t *testing.T) {
	f := &failAfter{n: 1}
	w := New(f)
	fmt.Fprintf(w, "one %d\n", 1)
	if w.Err() != nil {
		t.Fatalf("Err after a good write = %v", w.Err())
	}
	fmt.Fprintf(w, "two\n")
	f.n = 5 // the target would take more now: the writer still refuses
	fmt.Fprintf(w, "three\n")
	if !errors.Is(w.Err(), errFull) || f.buf.String() != "one 1\n" {
		t.Errorf("Err = %v, written %q", w.Err(), f.buf.String())
	}
}

type short struct{}

func (short) Write(p []byte) (int, error) { return len(p) - 1, nil }

// A short write without an error is io.ErrShortWrite.
func TestWriterShortWrite(t *testing.T) {
	w := New(short{})
	if _, err := w.Write([]byte("abc")); !errors.Is(err, io.ErrShortWrite) || !errors.Is(w.Err(), io.ErrShortWrite) {
		t.Errorf("Write = %v, Err = %v", err, w.Err())
	}
}

// A log's failure is kept for Err, and every write is reported as done:
// the caller's other writers (io.MultiWriter) go on.
func TestLogKeepsGoing(t *testing.T) {
	f := &failAfter{n: 1}
	var rest bytes.Buffer
	l := NewLog(f)
	mw := io.MultiWriter(l, &rest)
	for _, s := range []string{"a\n", "b\n", "c\n"} {
		if n, err := mw.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if !errors.Is(l.Err(), errFull) || f.buf.String() != "a\n" || rest.String() != "a\nb\nc\n" {
		t.Errorf("Err = %v, log %q, rest %q", l.Err(), f.buf.String(), rest.String())
	}
}
