// Package sizecheck is a test only: it holds arpatch's non-test Go files
// to at most MaxFileLines lines each and counts the functions over
// LongFunc lines, which may not exceed maxLong. Run
// `go test ./internal/sizecheck -v` to see the figures and the long
// functions, longest first. Test files are not counted.
package sizecheck
