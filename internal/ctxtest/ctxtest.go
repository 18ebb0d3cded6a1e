// Package ctxtest gives tests a context whose deadline passes when the
// test says so: a test of how code tells a caller's deadline from its own
// timeout or from a cancel needs context.DeadlineExceeded, but a real
// deadline can pass while a loaded machine is still starting the
// processes under test.
package ctxtest

import (
	"context"
	"sync"
	"time"
)

// expiring is a context with no parent, no values and no deadline that
// ends when expire is called, with Err context.DeadlineExceeded. It is not
// built on a context.WithCancel: a context derived from one of those
// takes its parent's error from the cancelCtx inside, context.Canceled,
// whatever the wrapper's Err says; one derived from expiring takes
// expiring's Err.
type expiring struct {
	done chan struct{}
	once sync.Once
}

func (e *expiring) Deadline() (time.Time, bool) { return time.Time{}, false }
func (e *expiring) Done() <-chan struct{}       { return e.done }
func (e *expiring) Value(any) any               { return nil }

func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Expiring returns a context and the func that ends it: once expire is
// called (any number of times, from any goroutine), the context is done
// and its Err, and the Err of every context derived from it, is
// context.DeadlineExceeded, as if its deadline had passed. It has no
// values and reports no deadline. It returns no error.
func Expiring() (ctx context.Context, expire func()) {
	e := &expiring{done: make(chan struct{})}
	return e, func() { e.once.Do(func() { close(e.done) }) }
}
