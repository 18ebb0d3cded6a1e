package gitsrc

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var mirror = flag.String("mirror", "", "a local SGLang mirror for the real-tree benchmarks (e.g. a bare clone)")
var mirrorCommit = flag.String("mirror-commit", "84118acf50b3a4c74e85e9ff9033792552de1a76", "the commit the real-tree benchmarks check out")

func BenchmarkMirrorCheckout(b *testing.B) {
	if *mirror == "" {
		b.Skip("pass -mirror PATH to check out a real tree")
	}
	tmp := b.TempDir()
	for i := 0; b.Loop(); i++ {
		dst := filepath.Join(tmp, fmt.Sprint(i))
		repo, _, err := Clone(context.Background(), *mirror, dst, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := repo.Checkout(*mirrorCommit); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
}

func BenchmarkMirrorChanges(b *testing.B) {
	if *mirror == "" {
		b.Skip("pass -mirror PATH to check out a real tree")
	}
	dst := filepath.Join(b.TempDir(), "work")
	repo, _, err := Clone(context.Background(), *mirror, dst, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := repo.Checkout(*mirrorCommit); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		repo, err := Open(dst)
		if err != nil {
			b.Fatal(err)
		}
		if cs, err := repo.Changes(); err != nil || len(cs) != 0 {
			b.Fatal(cs, err)
		}
	}
}
