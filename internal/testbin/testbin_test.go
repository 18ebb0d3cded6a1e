package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// TestNoTextFileBusy writes and runs fresh scripts while other goroutines
// start processes as fast as they can: every run must succeed and print
// what its script says. (With os.WriteFile in place of Write, some runs
// fail with "text file busy" on Linux.)
func TestNoTextFileBusy(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = exec.Command("true").Run() // only the forks matter
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for i := range 100 {
		p := filepath.Join(dir, "fake"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		if err := Write(p, []byte("#!/bin/sh\necho ran\n")); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(p).Output()
		if err != nil || string(out) != "ran\n" {
			t.Fatalf("run %d: %q, %v", i, out, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("run %d: mode %v, %v", i, fi.Mode(), err)
		}
	}
}
