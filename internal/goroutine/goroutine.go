// Package goroutine starts arpatch's goroutines. Every goroutine of the
// module's non-test code starts with Go (this package's test fails on any
// other go statement), so that a panic on it reaches the command's top
// level: arpatch then exits 5, internal error, with the panic and its
// stack, where the Go runtime would end the process with exit code 2,
// which arpatch keeps for usage errors.
package goroutine

import (
	"runtime/debug"
	"sync/atomic"
)

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
	go func() {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if h := handler.Load(); h != nil {
				(*h)(p, debug.Stack())
				return
			}
			panic(p)
		}()
		f()
	}()
}
