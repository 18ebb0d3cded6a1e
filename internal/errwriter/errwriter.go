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
	log bool // NewLog: report every write as done
}

// New returns a Writer writing to w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p to the underlying writer unless an earlier write failed.
// It returns len(p) and the first error (a short write is
// io.ErrShortWrite), so that fmt.Fprintf callers may ignore it and ask
// Err once.
// A Writer from NewLog returns len(p) and nil whatever happened.
func (e *Writer) Write(p []byte) (int, error) {
	if e.err != nil {
		if e.log {
			return len(p), nil
		}
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	e.err = err
	if e.log {
		return len(p), nil
	}
	return n, err
}

// Err returns the first write error, or nil.
func (e *Writer) Err() error { return e.err }

// NewLog returns a Writer for a log kept beside the real work (a --log
// file in an io.MultiWriter): a write that fails ends the log but is
// reported to the caller as written, so that the work goes on; Err
// returns the failure afterwards, for the caller to name the log.
func NewLog(w io.Writer) *Writer { return &Writer{w: w, log: true} }
