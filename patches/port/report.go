package port

import (
	"fmt"
	"io"
	"strings"

	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/shellq"
)

// Command is the `arpatch patches port` command line that writes the
// draft of series for commit to into out (none: "", the command then only
// reports), reading repo; patchesDir is the --patches-dir the series comes
// from ("" for the embedded ones). Paths are quoted for sh where they need
// it, so the line runs as printed.
func Command(series, repo, to, out, patchesDir string) string {
	s := fmt.Sprintf("arpatch patches port --series %s --to %s --repo %s", series, to, shellq.Path(repo))
	if out != "" {
		s += " --out " + shellq.Path(out)
	}
	if patchesDir != "" {
		s += " --patches-dir " + shellq.Path(patchesDir)
	}
	return s
}

// Summary says in one line whether a clean draft exists and what each hunk
// did, e.g. "clean: 1 exact, 5 offset; 1 file moved".
func (r *Report) Summary() string {
	c := r.Counts()
	var parts []string
	for _, s := range []Status{Exact, Offset, Merged, Conflict} {
		if c[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c[s], s))
		}
	}
	word := "clean"
	switch {
	case r.Refused != "":
		word = "refused by arpatch's effect rule"
	case !r.Clean:
		word = string(Conflict)
	}
	s := word + ": " + strings.Join(parts, ", ") + " hunks"
	if n := len(r.Moves); n == 1 {
		s += "; 1 file moved"
	} else if n > 1 {
		s += fmt.Sprintf("; %d moves", n)
	}
	return s
}

// WriteText prints the report for a terminal: the moves, one line per
// hunk, then every conflict with the lines of base, ours and theirs.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "port %s (tested on %s) to %s: %s\n", r.Series, githash.Hash(r.From).Short(), githash.Hash(r.To).Short(), r.Summary())
	for _, m := range r.Moves {
		if m.Commit == "" { // named by --move: String says so
			fmt.Fprintf(w, "  %s %s\n", m.From, m)
			continue
		}
		fmt.Fprintf(w, "  %s %s (%s)\n", m.From, m, m.Subject)
	}
	if r.Refused != "" {
		fmt.Fprintf(w, "refused: the ported series applies, but %s\n", strings.ReplaceAll(r.Refused, "\n", "\n  "))
	}
	for _, p := range r.Patches {
		for _, h := range p.Hunks {
			st := string(h.Status)
			switch h.Status {
			case Exact, Offset:
				if h.Offset != 0 {
					st = fmt.Sprintf("offset %+d (line %d)", h.Offset, h.Line)
				}
			case Merged:
				st = "merged three-way"
			}
			if len(h.Moved) > 0 {
				st += ", moved"
			}
			fmt.Fprintf(w, "  %s %s %s: %s\n", h.Patch, h.Path, h.Hunk, st)
		}
	}
	var earlier []string // the patches before p, which base includes
	for _, p := range r.Patches {
		baseLabel := "base (" + githash.Hash(r.From).Short() + ")"
		if len(earlier) > 0 {
			baseLabel = "base (" + githash.Hash(r.From).Short() + " with " + strings.Join(earlier, ", ") + ")"
		}
		earlier = append(earlier, p.Patch)
		for _, c := range p.Conflicts {
			where := c.Path
			if len(c.Hunks) > 0 {
				where += " " + strings.Join(c.Hunks, ", ")
			}
			fmt.Fprintf(w, "conflict: %s %s: %s", c.Patch, where, c.Reason)
			if c.BaseLine > 0 || len(c.Base)+len(c.Ours)+len(c.Theirs) > 0 {
				fmt.Fprintf(w, " (from line %d at %s)", c.BaseLine, githash.Hash(r.From).Short())
			}
			fmt.Fprintln(w)
			for _, side := range []struct {
				name  string
				lines []string
			}{{baseLabel, c.Base}, {"ours (the patch)", c.Ours}, {"theirs (" + githash.Hash(r.To).Short() + ")", c.Theirs}} {
				if c.BaseLine == 0 && len(side.lines) == 0 {
					continue
				}
				fmt.Fprintf(w, "  %s:\n", side.name)
				for _, l := range side.lines {
					fmt.Fprintf(w, "    | %s\n", strings.TrimRight(l, "\r\n"))
				}
			}
		}
	}
}

// DraftDir is where the remedies arpatch prints put a draft:
// arpatch-port/<series>-<12 hex of the commit>, a series directory under
// a directory that `--patches-dir arpatch-port` then reads.
func DraftDir(series, commit string) string {
	return "arpatch-port/" + series + "-" + githash.Hash(commit).Short()
}
