package checkout

import (
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/patches"
)

// StatusReport describes a checkout.
type StatusReport struct {
	Src   string `json:"src"`
	Head  string `json:"head"`
	State *State `json:"state"` // nil when arpatch applied nothing here
	// Drift lists recorded files whose bytes changed since apply.
	Drift []FileDrift `json:"drift"`
	// Other lists uncommitted changes to files the series did not touch.
	Other []gitsrc.Change `json:"other_changes"`
	// Untracked lists untracked files git does not ignore.
	Untracked []string `json:"untracked"`
	// SkipWorktree lists index entries marked skip-worktree, whose edits
	// git status does not show (git update-index --skip-worktree).
	SkipWorktree []string `json:"skip_worktree"`
	// SeriesChanged lists patches whose sha256 in this arpatch's series
	// differs from the one applied (arpatch or the series was updated).
	SeriesChanged []string `json:"series_changed"`
}

// Clean reports whether the checkout is exactly what a finished apply left.
func (s *StatusReport) Clean() bool {
	return s.State != nil && !s.State.Incomplete && !s.State.Reverting && len(s.Drift) == 0 && s.Head == s.State.Commit
}

// Status reads the checkout's apply state and compares it with the tree.
// cat may be nil; when given, patch hashes are compared with its series.
func Status(src string, cat *patches.Catalog) (*StatusReport, error) {
	repo, err := gitsrc.Open(src)
	if err != nil {
		return nil, err
	}
	rep := &StatusReport{Src: src}
	if rep.Head, err = repo.Head(); err != nil {
		return nil, err
	}
	st, err := ReadState(repo.GitDir())
	if err != nil {
		return nil, err
	}
	rep.State = st
	changes, err := repo.Changes()
	if err != nil {
		return nil, err
	}
	recorded := map[string]bool{}
	if st != nil {
		for _, f := range st.Files {
			recorded[f.Path] = true
		}
		if rep.Drift, err = st.drift(safefs.Root{Dir: src}); err != nil {
			return nil, err
		}
		if cat != nil && st.Series != "" {
			if s, err := cat.Get(st.Series); err == nil {
				have := map[string]string{}
				for _, p := range s.Patches {
					have[p.File] = p.SHA256
				}
				for _, p := range st.Patches {
					if have[p.Name] != p.SHA256 {
						rep.SeriesChanged = append(rep.SeriesChanged, p.Name)
					}
				}
			}
		}
	}
	for _, c := range changes {
		switch {
		case c.Untracked():
			rep.Untracked = append(rep.Untracked, c.Path)
		case !recorded[c.Path]:
			rep.Other = append(rep.Other, c)
		}
	}
	if rep.SkipWorktree, err = repo.SkipWorktree(); err != nil {
		return nil, err
	}
	return rep, nil
}
