package sglang

// SetMaxLine lowers the longest stream line a request reads, for a test;
// it returns the function that restores it.
func SetMaxLine(n int) func() {
	old := maxLine
	maxLine = n
	return func() { maxLine = old }
}
