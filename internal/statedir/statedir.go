// Package statedir is where arpatch keeps the working files a command
// makes without being told where: bench's server logs (bench-logs/) and
// ab build's two checkouts (ab/). Nothing goes into the current directory
// unless the user names it.
//
// The directory is $ARPATCH_STATE, else $XDG_STATE_HOME/arpatch, else
// ~/.local/state/arpatch (the XDG base directory specification's state
// home). The build cache is elsewhere: kernels.DefaultCacheDir.
package statedir

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrNoHome is returned when neither ARPATCH_STATE, XDG_STATE_HOME nor
// HOME says where the state directory is.
var ErrNoHome = errors.New("no state directory: ARPATCH_STATE, XDG_STATE_HOME and HOME are all unset; set ARPATCH_STATE to a directory, or pass the path explicitly")

// Dir returns the state directory (not created). Errors: ErrNoHome.
func Dir() (string, error) {
	if d := os.Getenv("ARPATCH_STATE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "arpatch"), nil
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".local", "state", "arpatch"), nil
	}
	return "", ErrNoHome
}

// Path returns name inside the state directory. Errors: ErrNoHome.
func Path(name string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, name), nil
}
