package checkout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/testrepo"
)

// Benchmarks on a fixture shaped like SGLang at 84118acf: the fixture's
// own files plus testrepo.WriteSized's 4,303 (about 680 directories at
// upstream's depths, 47 MB), committed and put into one deltified pack as
// a clone from a server holds them.
//
//	go test -run XXX -bench . -benchtime 10x ./checkout
func bigFixture(b *testing.B) *fixtureEnv {
	b.Helper()
	f := newFixtureOwn(b) // grows its upstream
	if _, err := testrepo.WriteSized(f.up); err != nil {
		b.Fatal(err)
	}
	c, err := testrepo.Commit(f.up, "grow to SGLang's size")
	if err != nil {
		b.Fatal(err)
	}
	if err := testrepo.Pack(f.up); err != nil {
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

// BenchmarkStatus measures Status (apply state, drift, git status, the
// kernel project's untracked-file guards) on the applied checkout.
func BenchmarkStatus(b *testing.B) {
	f := bigFixture(b)
	if _, err := Apply(context.Background(), ApplyOptions{Recipe: f.recipe, Catalog: f.cat, Src: f.work, Repo: f.up, Series: "fx"}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		rep, err := Status(f.work, f.cat)
		if err != nil || !rep.Clean() {
			b.Fatal(rep, err)
		}
	}
}

// BenchmarkCloneLocal measures a clone from a local repository path:
// objects hardlinked, refs copied, no checkout.
func BenchmarkCloneLocal(b *testing.B) {
	benchClone(b, func(f *fixtureEnv) string { return f.up }, false)
}

// BenchmarkCheckout measures writing the pinned commit's files after a
// local clone (the clone itself is not timed).
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
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
