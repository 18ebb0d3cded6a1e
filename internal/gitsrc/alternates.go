package gitsrc

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// altStorage is a repository's own storage (whose file system, rooted at
// its git directory, cannot reach its alternates) and the object stores
// its objects/info/alternates names, each opened once. go-git's own
// alternates lookup opens a new store per object it does not hold, which
// reads the alternate's pack index again each time: on SGLang's history
// (225,000 objects) a `patches check` of one commit through a `git clone
// --shared` took 80 s instead of 4.
type altStorage struct {
	*filesystem.Storage
	alts []*filesystem.Storage
}

// openAlternates opens each object directory objects/info/alternates
// names (absolute, or relative to objects/), or returns nil when there is
// none, or one this cannot open as a store (a directory not named
// objects): the caller then takes go-git's lookup.
func openAlternates(objects string) []*filesystem.Storage {
	b, err := os.ReadFile(filepath.Join(objects, "info", "alternates"))
	if err != nil {
		return nil
	}
	var alts []*filesystem.Storage
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join(objects, l)
		}
		if filepath.Base(l) != "objects" {
			return nil
		}
		if fi, err := os.Stat(l); err != nil || !fi.IsDir() {
			return nil
		}
		// An alternate's own alternates are read at their absolute paths.
		alts = append(alts, filesystem.NewStorageWithOptions(osfs.New(filepath.Dir(l)), cache.NewObjectLRUDefault(), filesystem.Options{AlternatesFS: osfs.New("/")}))
	}
	return alts
}

func (s *altStorage) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := s.Storage.EncodedObject(t, h)
	if !errors.Is(err, plumbing.ErrObjectNotFound) {
		return o, err
	}
	for _, a := range s.alts {
		if o, err := a.EncodedObject(t, h); err == nil {
			return o, nil
		}
	}
	return nil, plumbing.ErrObjectNotFound
}

func (s *altStorage) HasEncodedObject(h plumbing.Hash) error {
	err := s.Storage.HasEncodedObject(h)
	if !errors.Is(err, plumbing.ErrObjectNotFound) {
		return err
	}
	for _, a := range s.alts {
		if a.HasEncodedObject(h) == nil {
			return nil
		}
	}
	return plumbing.ErrObjectNotFound
}

func (s *altStorage) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	n, err := s.Storage.EncodedObjectSize(h)
	if !errors.Is(err, plumbing.ErrObjectNotFound) {
		return n, err
	}
	for _, a := range s.alts {
		if n, err := a.EncodedObjectSize(h); err == nil {
			return n, nil
		}
	}
	return 0, plumbing.ErrObjectNotFound
}

// HashesWithPrefix is every object, here or in an alternate, whose hash
// starts with prefix (an abbreviated --commit).
func (s *altStorage) HashesWithPrefix(prefix []byte) ([]plumbing.Hash, error) {
	out, err := s.Storage.HashesWithPrefix(prefix)
	if err != nil {
		return nil, err
	}
	for _, a := range s.alts {
		hs, err := a.HashesWithPrefix(prefix)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			if !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out, nil
}
