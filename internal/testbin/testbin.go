// Package testbin writes the fake programs tests run (a fake python3,
// torchrun or nvidia-smi) so that running them cannot fail with "text
// file busy".
//
// Linux refuses to execute a file that any process holds open for
// writing (ETXTBSY). A test that writes a script and runs it at once
// races with every other goroutine of the test binary that starts a
// process: a fork made while the script is open for writing gives the
// child a copy of that descriptor, which the child holds until its own
// exec closes it (close-on-exec), and an exec of the script in that
// window fails. Go's issue 22315 describes it; the fix is to keep forks
// out of the window, as the os/exec package's own tests do.
package testbin

import (
	"os"
	"syscall"
)

// Write writes data to path as an executable (mode 0755, less the
// umask), holding syscall.ForkLock for reading while the file is open, so
// that no process started by this test binary in the meantime inherits
// the descriptor. It returns os.WriteFile's error.
func Write(path string, data []byte) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	return os.WriteFile(path, data, 0o755)
}
