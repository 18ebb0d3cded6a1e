package checkout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/testrepo"
)

// Benchmarks on a fixture of SGLang's size at 84118acf (4,303 files,
// 47 MB): the fixture's own files plus 4,300 generated ones of 11 KB.
//
//	go test -run XXX -bench . -benchtime 20x ./internal/checkout
const (
	benchFiles    = 4300
	benchFileSize = 11 << 10
)

func bigFixture(b *testing.B) *fixtureEnv {
	b.Helper()
	f := newFixture(b)
	line := strings.Repeat("x", 63) + "\n"
	body := strings.Repeat(line, benchFileSize/len(line))
	files := map[string]string{}
	for i := 0; i < benchFiles; i++ {
		files[fmt.Sprintf("python/sglang/pkg%02d/mod%04d.py", i%40, i)] = fmt.Sprintf("# module %d\n", i) + body
	}
	if err := testrepo.WriteFiles(f.up, files); err != nil {
		b.Fatal(err)
	}
	c, err := testrepo.Commit(f.up, "grow to SGLang's size")
	if err != nil {
		b.Fatal(err)
	}
	// The series was tested on the first commit; pin the grown one.
	f.recipe.Upstream.Commit = c
	return f
}

// BenchmarkApply measures `arpatch apply` on a clean checkout of realistic
// size: git status, series verification, in-memory apply, atomic writes
// and state. The revert between iterations is not timed.
func BenchmarkApply(b *testing.B) {
	f := bigFixture(b)
	ctx := context.Background()
	if _, err := Apply(ctx, ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: f.work, Repo: f.up, Series: "fx"}); err != nil {
		b.Fatal(err)
	}
	if _, err := Revert(RevertOptions{Src: f.work}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Apply(ctx, ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: f.work, Series: "fx"}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := Revert(RevertOptions{Src: f.work}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkCloneLocal measures a clone from a local repository path:
// objects hardlinked, refs copied, no checkout.
func BenchmarkCloneLocal(b *testing.B) {
	benchClone(b, func(f *fixtureEnv) string { return f.up }, false)
}

// BenchmarkCheckout measures writing the pinned commit's 4,300 files after
// a local clone (the clone itself is not timed).
func BenchmarkCheckout(b *testing.B) {
	benchClone(b, func(f *fixtureEnv) string { return f.up }, true)
}

func benchClone(b *testing.B, src func(*fixtureEnv) string, checkout bool) {
	f := bigFixture(b)
	tmp := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(tmp, fmt.Sprint(i))
		if checkout {
			b.StopTimer()
		}
		repo, _, err := gitsrc.Clone(context.Background(), src(f), dst, nil)
		if err != nil {
			b.Fatal(err)
		}
		if checkout {
			b.StartTimer()
			if err := repo.Checkout(f.recipe.Upstream.Commit); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
}
