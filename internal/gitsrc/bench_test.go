package gitsrc

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/arpatch/arpatch/internal/testrepo"
)

// Benchmarks on a repository shaped like upstream SGLang's (see
// testrepo.WriteSized: 4,303 files in about 680 directories at upstream's
// depths, 47 MB; two commits, the second rewriting every tenth file, all
// in one deltified pack), or, with -mirror, on a real mirror:
//
//	go test -run XXX -bench . -benchtime 10x ./internal/gitsrc
//	go test -run XXX -bench Mirror -benchtime 10x ./internal/gitsrc -mirror /path/to/sglang.git
var (
	mirror       = flag.String("mirror", "", "a local SGLang mirror (bare or not) for the Mirror benchmarks")
	mirrorCommit = flag.String("mirror-commit", "84118acf50b3a4c74e85e9ff9033792552de1a76", "the commit the Mirror benchmarks check out")
)

var sized struct {
	once   sync.Once
	dir    string
	commit string
	err    error
}

// sizedRepo builds the SGLang-shaped repository once per test binary, in
// a directory TestMain removes.
func sizedRepo(b *testing.B) (string, string) {
	b.Helper()
	sized.once.Do(func() {
		sized.dir, sized.err = os.MkdirTemp("", "arpatch-sized-")
		if sized.err != nil {
			return
		}
		up := filepath.Join(sized.dir, "up")
		if _, sized.err = testrepo.WriteSized(up); sized.err != nil {
			return
		}
		if _, sized.err = testrepo.Init(up); sized.err != nil {
			return
		}
		// A second commit rewrites every tenth file a little, so the
		// pack holds deltas as upstream's does.
		n := 0
		sized.err = filepath.WalkDir(up, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() || filepath.Base(filepath.Dir(p)) == ".git" {
				return err
			}
			if n++; n%10 == 0 {
				f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(f, "# edited in the second commit\n")
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			}
			return nil
		})
		if sized.err != nil {
			return
		}
		if sized.commit, sized.err = testrepo.Commit(up, "edit every tenth file"); sized.err != nil {
			return
		}
		sized.err = testrepo.Pack(up)
	})
	if sized.err != nil {
		b.Fatal(sized.err)
	}
	return filepath.Join(sized.dir, "up"), sized.commit
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := fixtures.Run(m)
	if sized.dir != "" {
		_ = os.RemoveAll(sized.dir) // a temp dir; the exit code is what counts
	}
	os.Exit(code)
}

// BenchmarkCheckout measures Checkout of the SGLang-shaped commit into a
// fresh local clone (the clone is not timed).
func BenchmarkCheckout(b *testing.B) {
	up, commit := sizedRepo(b)
	benchCheckout(b, up, commit)
}

// BenchmarkMirrorCheckout is BenchmarkCheckout on -mirror at
// -mirror-commit.
func BenchmarkMirrorCheckout(b *testing.B) {
	if *mirror == "" {
		b.Skip("pass -mirror PATH to check out a real tree")
	}
	benchCheckout(b, *mirror, *mirrorCommit)
}

func benchCheckout(b *testing.B, src, commit string) {
	tmp := b.TempDir()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		dst := filepath.Join(tmp, fmt.Sprint(i))
		repo, _, err := Clone(context.Background(), src, dst, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := repo.Checkout(commit); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkChanges measures Changes (what status and apply ask) on a
// clean checkout of the SGLang-shaped commit, opening the checkout each
// time as a command does.
func BenchmarkChanges(b *testing.B) {
	up, commit := sizedRepo(b)
	benchChanges(b, up, commit, (*Repo).Changes)
}

// BenchmarkMirrorChanges is BenchmarkChanges on -mirror.
func BenchmarkMirrorChanges(b *testing.B) {
	if *mirror == "" {
		b.Skip("pass -mirror PATH to check out a real tree")
	}
	benchChanges(b, *mirror, *mirrorCommit, (*Repo).Changes)
}

func benchChanges(b *testing.B, src, commit string, status func(*Repo) ([]Change, error)) {
	dst := filepath.Join(b.TempDir(), "work")
	repo, _, err := Clone(context.Background(), src, dst, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := repo.Checkout(commit); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		repo, err := Open(dst)
		if err != nil {
			b.Fatal(err)
		}
		if cs, err := status(repo); err != nil || len(cs) != 0 {
			b.Fatal(cs, err)
		}
	}
}

// BenchmarkGoGitStatus is go-git's full status on the same checkout, the
// way Changes answered before it compared stat data.
func BenchmarkGoGitStatus(b *testing.B) {
	up, commit := sizedRepo(b)
	benchChanges(b, up, commit, (*Repo).goGitChanges)
}

// BenchmarkReadFileAtCommit measures reading one file of the
// SGLang-shaped commit from the object store (TreeAt and ReadFile, as
// apply's HEAD check and revert do), opening the repository each time.
func BenchmarkReadFileAtCommit(b *testing.B) {
	up, commit := sizedRepo(b)
	repo, err := OpenAny(up)
	if err != nil {
		b.Fatal(err)
	}
	t, err := repo.TreeAt(commit)
	if err != nil {
		b.Fatal(err)
	}
	paths, err := t.Paths()
	if err != nil {
		b.Fatal(err)
	}
	p := paths[len(paths)/2]
	for b.Loop() {
		repo, err := OpenAny(up)
		if err != nil {
			b.Fatal(err)
		}
		t, err := repo.TreeAt(commit)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := t.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	}
}
