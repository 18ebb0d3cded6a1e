// Command demo runs arpatch's nightly end to end on this machine, with no
// GPU and no network (package nightly/internal/demo): six nights on
// fixtures, the last with a planted 10% regression; it exits with the
// nightly's exit code (1).
//
// Run it from the repository root:
//
//	go run ./nightly/demo [-dir nightly-demo]
package main

import (
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/arpatch/arpatch/nightly/internal/demo"
)

func main() {
	serve := func(h http.Handler) (string, func()) {
		s := httptest.NewServer(h)
		return s.URL, s.Close
	}
	os.Exit(demo.Run(os.Args[1:], os.Stdout, os.Stderr, serve, nil))
}
