package statedir

import (
	"errors"
	"testing"
)

func TestDir(t *testing.T) {
	for _, c := range []struct {
		state, xdg, home string
		want             string
		err              error
	}{
		{"/s", "/x", "/h", "/s", nil},
		{"", "/x", "/h", "/x/arpatch", nil},
		{"", "relative", "/h", "/h/.local/state/arpatch", nil}, // XDG asks for absolute paths
		{"", "", "/h", "/h/.local/state/arpatch", nil},
		{"", "", "", "", ErrNoHome},
	} {
		t.Setenv("ARPATCH_STATE", c.state)
		t.Setenv("XDG_STATE_HOME", c.xdg)
		t.Setenv("HOME", c.home)
		got, err := Dir()
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("%+v: Dir() = %q, %v", c, got, err)
		}
	}
	t.Setenv("ARPATCH_STATE", "/s")
	if p, err := Path("ab"); p != "/s/ab" || err != nil {
		t.Errorf("Path = %q, %v", p, err)
	}
}
