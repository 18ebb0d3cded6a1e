package lazyre

import "testing"

// New compiles on the first call, once, and panics there on a bad
// expression.
func TestNew(t *testing.T) {
	re := New(`^a(\d+)$`)
	first := re()
	if got := first.FindStringSubmatch("a42"); len(got) != 2 || got[1] != "42" {
		t.Errorf("FindStringSubmatch(a42) = %q, want [a42 42]", got)
	}
	if re() != first {
		t.Error("the second call compiled the expression again")
	}
	bad := New(`(`)
	defer func() {
		if recover() == nil {
			t.Error("a bad expression did not panic on first use")
		}
	}()
	bad()
}
