package pyenv

import "testing"

func TestOr(t *testing.T) {
	for in, want := range map[string]string{"": "python3", "/venv/bin/python": "/venv/bin/python"} {
		if got := Or(in); got != want {
			t.Errorf("Or(%q) = %q, want %q", in, got, want)
		}
	}
}
