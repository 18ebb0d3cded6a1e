// Package goroutine starts arpatch's goroutines. Every goroutine of the
// module's non-test code starts with Go (this package's test fails on any
// other go statement), so that a panic on it reaches the command's top
// level: arpatch then exits 5, internal error, with the panic and its
// stack, where the Go runtime would end the process with exit code 2,
// which arpatch keeps for usage errors.
package goroutine

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// live counts the goroutines Go started whose f has not returned.
var live atomic.Int64

// ending is held by a panic's handler from its start (and, as the
// handler ends the process, never given back) and by Ending: so the
// command's goroutine, finishing because a worker's deferred wg.Done or
// close(done) ran while that worker was still unwinding its panic, cannot
// print its own error or exit before the handler has ended the process.
var ending sync.Mutex

// settle is how long Ending waits for a goroutine that may be unwinding
// a panic to reach its handler: the unwinding runs concurrently, a few
// microseconds after the worker's deferred functions let the command go
// on, so this is generous; it is paid only on the way out of a command,
// and only while goroutines Go started are still running.
const settle = 5 * time.Millisecond

// Ending runs last (the command's error message and exit) once no panic
// on a goroutine Go started is on its way to the handler: while any such
// goroutine is still running it first waits briefly (settle), then takes
// the lock a panic's handler holds. If a handler has taken it, Ending
// blocks until that handler ends the process, so the process's one
// message is the panic's.
func Ending(last func()) {
	if live.Load() > 0 {
		time.Sleep(settle)
	}
	ending.Lock()
	defer ending.Unlock()
	last()
}

// handler is the function SetPanicHandler set, or nil.
var handler atomic.Pointer[func(value any, stack []byte)]

// SetPanicHandler makes h the function that a panic on a goroutine Go
// started is handed to: the panic's value and the goroutine's stack at
// the panic (debug.Stack, the panicking frames included). The command's
// top level sets it once, before any command runs; h is expected to end
// the process (arpatch's prints the internal error and exits 5). If h
// returns, the goroutine ends there. nil takes the handler away: a panic
// on Go's goroutines then ends the process as the Go runtime does (exit
// 2), which is what tests and other callers of the packages get.
func SetPanicHandler(h func(value any, stack []byte)) {
	if h == nil {
		handler.Store(nil)
		return
	}
	handler.Store(&h)
}

// Go runs f on a new goroutine, as `go f()` does, handing a panic in f to
// the handler SetPanicHandler set (with none, it panics again with the
// same value). runtime.Goexit (t.FailNow) ends the goroutine as usual.
func Go(f func()) {
	live.Add(1)
	go func() {
		defer func() {
			p := recover()
			if p == nil {
				live.Add(-1)
				return
			}
			if h := handler.Load(); h != nil {
				ending.Lock()
				live.Add(-1)
				(*h)(p, debug.Stack())
				ending.Unlock() // (a handler that returns)
				return
			}
			live.Add(-1)
			panic(p)
		}()
		f()
	}()
}
