package checkout

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/patches"
)

// DirtyError is a checkout with uncommitted changes to tracked files.
type DirtyError struct {
	Src     string
	Changes []gitsrc.Change
	// Fits, when the changes touch the series' files, says how each patch
	// relates to the tree (a half-applied series shows here).
	Fits []patches.PatchFit
	// Committed is set when the tree is clean but its commit already holds
	// some of the patches.
	Committed bool
	// Hidden are the changed paths whose index entries are marked
	// assume-unchanged: git status and git stash do not see them until
	// the bit is cleared, which the remedy does first.
	Hidden []string
	// Again is the command the remedy says to run again ("apply" when
	// empty; ApplyOptions.Again).
	Again string
}

func (e *DirtyError) Error() string {
	var b strings.Builder
	applied := 0
	for _, f := range e.Fits {
		if f.Fit == patches.FitApplied {
			applied++
		}
	}
	if e.Committed {
		fmt.Fprintf(&b, "%s is at a commit that already holds part of the series (merged upstream, or committed by hand):", e.Src)
		for _, f := range e.Fits {
			fmt.Fprintf(&b, "\n  %s: %s", f.Patch, fitWords(f.Fit))
		}
		b.WriteString("\nnothing was changed. Use a series made for this commit (arpatch patches check), or skip the patches it already holds with the recipe's skip list")
		return b.String()
	}
	if applied > 0 && applied < len(e.Fits) {
		fmt.Fprintf(&b, "%s is half-applied: arpatch has no state for it and will not guess which bytes are yours:", e.Src)
		for _, f := range e.Fits {
			fmt.Fprintf(&b, "\n  %s: %s", f.Patch, fitWords(f.Fit))
		}
		b.WriteString("\nuncommitted changes:")
	} else {
		fmt.Fprintf(&b, "%s has uncommitted changes:", e.Src)
	}
	for _, c := range e.Changes {
		b.WriteString("\n  " + c.String())
	}
	b.WriteString("\nnothing was changed. ")
	b.WriteString(unhideFirst(e.Src, e.Hidden, fmt.Sprintf("stash them (`%s`), or drop them (`%s`; this loses them), then run %s again",
		sh("git", "-C", e.Src, "stash"), sh("git", "-C", e.Src, "reset", "--hard"), cmp.Or(e.Again, "apply"))))
	return b.String()
}

func fitWords(f patches.Fit) string {
	switch f {
	case patches.FitApplied:
		return "applied"
	case patches.FitConflict:
		return "partly applied or changed: neither it nor its reverse applies"
	}
	return "not applied"
}

// CommitMismatchError is a checkout at another commit than the one asked
// for. Missing: the checkout does not hold the commit asked for, so it
// must be fetched before it can be checked out.
type CommitMismatchError struct {
	Src, Head, Want string
	FromFlag        bool
	Missing         bool
	// Applied names the series arpatch applied to Src at Head: its files
	// hold the patches, so git checkout would refuse to move, and the
	// remedy reverts first. AppliedRecipe is that apply's recipe, set
	// also for a recipe with no series (Applied ""): its state, left at
	// Head, would refuse the commit checked out, so the remedy reverts
	// (forgets) it first too.
	Applied, AppliedRecipe string
	// Again is the command the remedy says to run again ("apply" when
	// empty; ApplyOptions.Again).
	Again string
}

func (e *CommitMismatchError) Error() string {
	again := cmp.Or(e.Again, "apply")
	src := "the recipe pins"
	fix := fmt.Sprintf("Check out the pin (`%s`) or, to patch this commit, pass --commit %s", sh("git", "-C", e.Src, "checkout", "--detach", e.Want), e.Head)
	if e.FromFlag {
		src = "--commit asks for"
		fix = fmt.Sprintf("Check it out first (`%s`)", sh("git", "-C", e.Src, "checkout", "--detach", e.Want))
	}
	if e.Missing {
		fix = fmt.Sprintf("%s does not hold commit %s: fetch it (`%s`), check it out (`%s`), then run %s again. If the fetch does not bring it, origin has no such commit: check the hash",
			e.Src, e.Want, sh("git", "-C", e.Src, "fetch", "origin"), sh("git", "-C", e.Src, "checkout", "--detach", e.Want), again)
		if !e.FromFlag {
			fix += fmt.Sprintf(", or, to patch this commit, pass --commit %s", e.Head)
		}
	}
	if e.Applied != "" || e.AppliedRecipe != "" {
		// git checkout refuses to move a tree whose files the series
		// changed: revert them to upstream's first. A recipe with no
		// series patched nothing, but its state names Head: revert
		// forgets it.
		fetch := ""
		if e.Missing {
			fetch = fmt.Sprintf(", fetch it (`%s`)", sh("git", "-C", e.Src, "fetch", "origin"))
		}
		why := fmt.Sprintf("Series %s is applied there, so git checkout would refuse to move: revert it", e.Applied)
		if e.Applied == "" {
			why = fmt.Sprintf("Recipe %s (no series) is recorded as applied there at %s: forget that apply", e.AppliedRecipe, e.Head)
		}
		fix = fmt.Sprintf("%s (`%s`)%s, check out %s (`%s`), then run %s again",
			why, sh("arpatch", "revert", "--src", e.Src), fetch, e.Want, sh("git", "-C", e.Src, "checkout", "--detach", e.Want), again)
	}
	return fmt.Sprintf("%s is at commit %s, but %s %s; nothing was changed. %s", e.Src, e.Head, src, e.Want, fix)
}

// movedHead is the refusal apply and revert share for a checkout whose
// HEAD is not the commit its state was applied at; again is the command
// to run once the remedy is done. A state that patched no file (a recipe
// with no series) holds nothing a checkout could lose, and revert
// forgets it at any commit: the remedy says that, not to go back.
func movedHead(src, head string, st *State, again string) error {
	if len(st.Files) == 0 {
		return fmt.Errorf("%s is at commit %s, but recipe %s (series (none): no file patched) was applied at %s; nothing was changed. Forget that apply (`%s`; with no patched file it works at any commit), then run %s again",
			src, head, st.Recipe, st.Commit, sh("arpatch", "revert", "--src", src), again)
	}
	revert := sh("arpatch", "revert", "--src", src)
	then := fmt.Sprintf("then revert (`%s`) or run %s again", revert, again)
	if again == "revert" {
		then = fmt.Sprintf("then run `%s` again", revert)
	}
	return fmt.Errorf("%s is at commit %s, but series %s was applied at %s; nothing was changed. Check that commit out again (`%s`), %s",
		src, head, cmp.Or(st.Series, "(none)"), st.Commit, sh("git", "-C", src, "checkout", "--detach", st.Commit), then)
}
