package testrepo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	git "github.com/go-git/go-git/v5"
)

// Shared holds fixture repositories that a test binary makes once and its
// tests share read-only: they clone from them, read them, compare them
// before and after, but never commit to them. Making a small fixture
// repository writes its tree and about 20 files and directories of git's;
// on a file system that pays for every recently deleted inode at each
// creation, one per test adds up. TestMain calls Run
// (or Close after the tests). The zero value is ready to use.
type Shared struct {
	mu    sync.Mutex
	dir   string
	repos map[string]sharedRepo
}

type sharedRepo struct {
	dir, commit string
	plain       bool // made by Dir: no repository, no HEAD to check
}

// Get returns the repository made for key and its commit: the first call
// for a key runs mk on a new directory (which does not exist yet) and
// keeps what it returns; later calls return the same. It returns mk's
// error, or the error making the directory that holds the repositories.
func (s *Shared) Get(key string, mk func(dir string) (commit string, err error)) (dir, commit string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.repos[key]; ok {
		return r.dir, r.commit, nil
	}
	if err := s.init(); err != nil {
		return "", "", err
	}
	dir = filepath.Join(s.dir, strconv.Itoa(len(s.repos)), "up")
	if commit, err = mk(dir); err != nil {
		return "", "", err
	}
	s.repos[key] = sharedRepo{dir: dir, commit: commit}
	return dir, commit, nil
}

// Dir returns the directory made for key, as Get does for a repository,
// for a read-only fixture that is no repository (a patch series, an empty
// HOME): the first call runs mk on a new path (which does not exist yet)
// and keeps it; later calls return the same. Close removes it without
// checking a HEAD. It returns mk's error, or the error making the
// directory that holds the fixtures.
func (s *Shared) Dir(key string, mk func(dir string) error) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.repos[key]; ok {
		return r.dir, nil
	}
	if err := s.init(); err != nil {
		return "", err
	}
	dir := filepath.Join(s.dir, strconv.Itoa(len(s.repos)))
	if err := mk(dir); err != nil {
		return "", err
	}
	s.repos[key] = sharedRepo{dir: dir, plain: true}
	return dir, nil
}

// init makes the directory that holds the fixtures, once; s.mu is held.
func (s *Shared) init() error {
	if s.dir != "" {
		return nil
	}
	d, err := os.MkdirTemp("", "arpatch-shared-fixtures-")
	if err != nil {
		return err
	}
	s.dir, s.repos = d, map[string]sharedRepo{}
	return nil
}

// Close checks that every shared repository's HEAD is still the commit
// it was made at, then removes them all. The error names each repository
// a test committed to (the tests after it cloned another tree than they
// asked for), and any removal error.
func (s *Shared) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" {
		return nil
	}
	var errs []error
	for key, r := range s.repos {
		if r.plain {
			continue
		}
		repo, err := git.PlainOpen(r.dir)
		if err == nil {
			h, herr := repo.Head()
			if err = herr; err == nil && h.Hash().String() != r.commit {
				err = fmt.Errorf("HEAD is %s, not the fixture commit %s: a test committed to a shared repository; give it its own", h.Hash(), r.commit)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("shared fixture %s: %w", key, err))
		}
	}
	errs = append(errs, os.RemoveAll(s.dir))
	s.dir, s.repos = "", nil
	return errors.Join(errs...)
}

// Run is for TestMain: it runs the tests, then Close. It returns m.Run's
// exit code, or 1 where the tests passed and Close fails (its error goes
// to stderr).
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
