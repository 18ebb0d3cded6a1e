package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// relaxFirstGC runs the process under GOGC 800 until the first garbage
// collection and puts the previous GOGC back after it.
func TestRelaxFirstGC(t *testing.T) {
	t.Setenv("GOGC", "")
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	restored := make(chan struct{})
	relaxFirstGC(func() { close(restored) })
	// SetGCPercent returns the setting it replaces; put it back at once.
	if got := debug.SetGCPercent(firstGCPercent); got != firstGCPercent {
		t.Fatalf("before the first collection GOGC is %d, want %d", got, firstGCPercent)
	}
	runtime.GC()
	select {
	case <-restored:
	case <-time.After(time.Minute):
		t.Fatal("GOGC was not put back after a collection")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("after the first collection GOGC is %d, want 100", got)
	}
}

// With GOGC set in the environment, relaxFirstGC changes nothing.
func TestRelaxFirstGCLeavesGOGCAlone(t *testing.T) {
	t.Setenv("GOGC", "50")
	prev := debug.SetGCPercent(50)
	defer debug.SetGCPercent(prev)
	relaxFirstGC(nil)
	if got := debug.SetGCPercent(50); got != 50 {
		t.Errorf("GOGC is %d, want the environment's 50", got)
	}
}
