// Package patches is arpatch's patch engine and its patch series.
//
// The engine (engine.go, hunk.go, parse.go) is generic: it parses git-style
// unified diffs under a DEP-3 header (ParseDiff), and applies, unapplies
// and checks them against any Tree in memory (Apply, Unapply, Check),
// writing nothing. Hunks are placed by git apply's rules (apply.c,
// apply_one_fragment, find_pos and match_fragment, without --unidiff-zero,
// -C or whitespace options): exact bytes, a hunk whose old side starts at
// line 0 or 1 anchored at the top of the file, a hunk without trailing
// context anchored at its end, no match on lines an earlier hunk wrote,
// and the new side's start only the first place tried. Where git apply
// takes the nearest of several matches, arpatch refuses a hunk that does
// not fit at its header's line and fits at more than one other place,
// listing them (ConflictError.Candidates). CRLF and missing final
// newlines are kept byte for byte; there is no fuzz.
//
// The series layer (series.go, catalog.go, resolve.go) reads
// patches/sglang/<series>/series.toml, verifies every patch's sha256, and
// picks the series for a commit. rules.go applies arpatch's built-in
// rules: the declared requires pairs (labels, CheckRequires) and the
// effect rule of package gaterule on the in-memory result (CheckResult),
// which is the SGLang-specific part and lives apart from the engine.
//
// It does not touch a checkout on disk: checkout writes the
// result, records the apply state and reverts it.
package patches
