// Package errwriter is a writer that keeps its first error: a renderer
// writes its lines to it without checking each one, and returns Err once
// at the end, so that a report written to a full disk, a closed pipe or
// a failed file is an error instead of a short file. It is the pattern of
// "Errors are values" (https://go.dev/blog/errors-are-values, errWriter).
package errwriter

import "io"

// Writer passes writes to its io.Writer until one fails; from then on it
// writes nothing and reports that error.
type Writer struct {
	w   io.Writer
	err error
}

// New returns a Writer writing to w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p to the underlying writer unless an earlier write failed.
// It returns len(p) and the first error (a short write is
// io.ErrShortWrite), so that fmt.Fprintf callers may ignore it and ask
// Err once.
func (e *Writer) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	e.err = err
	return n, err
}

// Err returns the first write error, or nil.
func (e *Writer) Err() error { return e.err }
