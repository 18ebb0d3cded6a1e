package gitsrc

import (
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// CommitTime returns the committer time of commit (40 hex), in UTC: the
// time reproducible builds take as SOURCE_DATE_EPOCH, the same on every
// machine that has the commit. The error names the commit and the
// repository when the commit is missing.
func (r *Repo) CommitTime(commit string) (time.Time, error) {
	c, err := r.r.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return time.Time{}, fmt.Errorf("commit %s is not in %s: %w", commit, r.Dir, err)
	}
	return c.Committer.When.UTC(), nil
}

// HasCommit reports whether the repository holds commit (40 hex) as a
// commit object.
func (r *Repo) HasCommit(commit string) bool {
	_, err := r.r.CommitObject(plumbing.NewHash(commit))
	return err == nil
}
