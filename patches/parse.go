package patches

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/sourcegraph/go-diff/diff"
)

// Op says what a FileChange does to its file.
type Op int

const (
	// Modify edits an existing file in place.
	Modify Op = iota
	// Create adds a file that must not exist yet.
	Create
	// Delete removes a file whose whole content the hunk lists.
	Delete
)

func (o Op) String() string {
	switch o {
	case Create:
		return "create"
	case Delete:
		return "delete"
	default:
		return "modify"
	}
}

// Header holds the DEP-3 fields at the top of a patch file
// (https://dep-team.pages.debian.net/deps/dep3/): Description, Author,
// Upstream-Status and Applies-To are required for patches in a series.
type Header struct {
	Description    string
	Author         string
	UpstreamStatus string
	AppliesTo      string
	// Fields holds every field as written, including the four above,
	// keyed by field name.
	Fields map[string]string
}

// Diff is a parsed patch file: its DEP-3 header and the changes to each file.
type Diff struct {
	Header  Header
	Changes []*FileChange
}

// FileChange is one file's part of a patch.
type FileChange struct {
	// Path is the repository-relative, slash-separated path ("a/" and
	// "b/" prefixes removed).
	Path string
	Op   Op
	// Mode is the git file mode of a created file ("100644" when the
	// patch names none).
	Mode string
	// OldMode and NewMode are set when the patch changes a kept file's
	// mode ("old mode 100644" / "new mode 100755").
	OldMode, NewMode string
	// ModeClaim is the mode the patch says the file has before it, and
	// ModeClaimBy the header line that says so: `old mode M`, `deleted
	// file mode M`, or `index A..B M` (git apply reads all three as the
	// old mode, apply.c gitdiff_oldmode, and only warns "has type ...,
	// expected ..." when the file's mode differs). A series is applied
	// only where the commit's mode is the claimed one; "" when no header
	// claims a mode for an existing file.
	ModeClaim, ModeClaimBy string
	Hunks                  []*Hunk
}

// extended holds the extended header lines of one file's git diff.
type extended struct {
	newFile, deletedFile, oldMode, newMode, indexMode string
}

// readExtended reads the extended header lines git writes between
// "diff --git" and "---" (apply.c, parse_git_diff_header: old mode, new
// mode, deleted file mode, new file mode, copy from/to, rename old/new,
// rename from/to, similarity index, dissimilarity index, index), and the
// binary markers. Each is carried out (modes, creation, deletion; index
// identifies blobs, which git apply does not check for text patches
// either) or refused by name (renames, copies and similarity scores, which
// a series may not carry; binary patches).
func readExtended(file string, lines []string) (extended, error) {
	var x extended
	for _, e := range lines {
		switch {
		case strings.HasPrefix(e, "diff --git "):
		case strings.HasPrefix(e, "new file mode "):
			x.newFile = strings.TrimSpace(strings.TrimPrefix(e, "new file mode "))
		case strings.HasPrefix(e, "deleted file mode "):
			x.deletedFile = strings.TrimSpace(strings.TrimPrefix(e, "deleted file mode "))
		case strings.HasPrefix(e, "old mode "):
			x.oldMode = strings.TrimSpace(strings.TrimPrefix(e, "old mode "))
		case strings.HasPrefix(e, "new mode "):
			x.newMode = strings.TrimSpace(strings.TrimPrefix(e, "new mode "))
		case strings.HasPrefix(e, "index "):
			f := strings.Fields(strings.TrimPrefix(e, "index "))
			if len(f) == 0 || !strings.Contains(f[0], "..") {
				return x, fmt.Errorf("%s: malformed %q; git writes \"index OLD..NEW [MODE]\"", file, e)
			}
			if len(f) > 1 {
				x.indexMode = f[1]
			}
		case hasAnyPrefix(e, renameCopyPrefixes):
			return x, fmt.Errorf("%s: %q: renames and copies are not supported in a series; write the change as a deletion and a creation (git diff --no-renames)", file, e)
		case strings.HasPrefix(e, "GIT binary patch"), strings.HasPrefix(e, "Binary files "):
			return x, fmt.Errorf("%s: binary patches are not supported (%q); a series carries text diffs only", file, e)
		default:
			return x, fmt.Errorf("%s: unknown header line %q between \"diff --git\" and the hunks", file, e)
		}
	}
	if x.newFile != "" && x.deletedFile != "" {
		return x, fmt.Errorf("%s: both \"new file mode\" and \"deleted file mode\"", file)
	}
	return x, nil
}

// checkMode accepts the file modes a series may carry: a regular file,
// executable or not. Symlinks (120000) and submodules (160000) are refused
// by name.
func checkMode(m string) error {
	switch m {
	case "", "100644", "100755":
		return nil
	case "120000":
		return fmt.Errorf("mode 120000 (a symlink) is not supported; a series changes regular files only")
	case "160000":
		return fmt.Errorf("mode 160000 (a submodule) is not supported; a series changes regular files only")
	}
	return fmt.Errorf("file mode %s is not supported (only 100644 and 100755)", m)
}

// Hunk is one "@@ -a,b +c,d @@" block. Old and New hold the lines of each side
// with their line endings, exactly as bytes; the last line of a side lacks its
// newline when the patch carries "\ No newline at end of file" for it.
type Hunk struct {
	// Header is the hunk header line without its section text,
	// e.g. "@@ -471,7 +471,8 @@".
	Header    string
	OrigStart int // 1-based line of the hunk's first old line (0 for an empty file)
	OrigLines int
	NewStart  int
	NewLines  int
	Old       []string
	New       []string
	// Leading and Trailing count the context lines before the hunk's
	// first change and after its last. git apply anchors a hunk without
	// trailing context at the end of the file.
	Leading, Trailing int
}

// ParseDiff parses a patch file: an optional DEP-3 header followed by a
// git-style unified diff, as written by `git diff`. CRLF content lines are
// kept byte for byte. name is used in errors only.
//
// It returns an error, naming the patch and the line, for a diff it cannot
// parse, a path that is absolute or leaves the tree, a rename, copy, mode
// change or binary patch (none of which a series may carry), or a hunk whose
// line counts disagree with its header.
func ParseDiff(name string, data []byte) (*Diff, error) {
	headerText, body, bodyLine := splitHeader(data)
	hdr, err := parseHeader(headerText)
	if err != nil {
		return nil, fmt.Errorf("patch %s: header: %w", name, err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, fmt.Errorf("patch %s: no diff found (expected a line starting with \"diff --git\" or \"--- \")", name)
	}
	// go-diff tolerates stray lines (it ends a file's hunks there and
	// drops the rest); check the structure first so nothing is lost.
	hunks, err := scanStructure(body, bodyLine)
	if err != nil {
		return nil, fmt.Errorf("patch %s: %w", name, err)
	}
	fds, err := diff.ParseMultiFileDiffOptions(body, diff.ParseOptions{KeepCR: true})
	if err != nil {
		return nil, fmt.Errorf("patch %s: diff starting at line %d: %w", name, bodyLine, err)
	}
	if len(fds) != len(hunks) {
		return nil, fmt.Errorf("patch %s: %d file sections found, but the parser read %d; the diff is malformed", name, len(hunks), len(fds))
	}
	for i, fd := range fds {
		if len(fd.Hunks) != hunks[i] {
			return nil, fmt.Errorf("patch %s: %s has %d hunk headers, but the parser read %d hunks; the diff is malformed", name, fileName(fd), hunks[i], len(fd.Hunks))
		}
	}
	d := &Diff{Header: hdr}
	seen := map[string]bool{}
	for _, fd := range fds {
		fc, err := fileChange(fd)
		if err != nil {
			return nil, fmt.Errorf("patch %s: %w", name, err)
		}
		if seen[fc.Path] {
			return nil, fmt.Errorf("patch %s: %s appears twice; merge its hunks into one file diff", name, fc.Path)
		}
		seen[fc.Path] = true
		d.Changes = append(d.Changes, fc)
	}
	if len(d.Changes) == 0 {
		return nil, fmt.Errorf("patch %s: the diff changes no file", name)
	}
	return d, nil
}

// splitHeader returns the text before the first diff line, the diff itself
// and the 1-based line where the diff starts.
func splitHeader(data []byte) (header, body []byte, line int) {
	off := 0
	line = 1
	for off < len(data) {
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			next = off + end + 1
		}
		l := data[off:next]
		if bytes.HasPrefix(l, []byte("diff --git ")) || bytes.HasPrefix(l, []byte("--- ")) {
			return data[:off], data[off:], line
		}
		off = next
		line++
	}
	return data, nil, line
}

// parseHeader reads RFC 822 style "Field: value" lines; indented lines
// continue the previous field. Blank lines and lines starting with '#' are
// skipped.
func parseHeader(text []byte) (Header, error) {
	h := Header{Fields: map[string]string{}}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(text))
	n := 0
	for sc.Scan() {
		n++
		l := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if (l[0] == ' ' || l[0] == '\t') && last != "" {
			h.Fields[last] += "\n" + strings.TrimSpace(l)
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok || strings.ContainsAny(k, " \t") {
			return h, fmt.Errorf("line %d: expected \"Field: value\", found %q", n, l)
		}
		last = k
		h.Fields[k] = strings.TrimSpace(v)
	}
	h.Description = h.Fields["Description"]
	if h.Description == "" {
		h.Description = h.Fields["Subject"]
	}
	h.Author = h.Fields["Author"]
	if h.Author == "" {
		h.Author = h.Fields["From"]
	}
	h.UpstreamStatus = h.Fields["Upstream-Status"]
	h.AppliesTo = h.Fields["Applies-To"]
	return h, nil
}

// Missing lists the required DEP-3 fields the header lacks.
func (h Header) Missing() []string {
	var m []string
	for _, f := range []struct{ name, v string }{
		{"Description", h.Description},
		{"Author", h.Author},
		{"Upstream-Status", h.UpstreamStatus},
		{"Applies-To", h.AppliesTo},
	} {
		if f.v == "" {
			m = append(m, f.name)
		}
	}
	return m
}

// fileChange turns go-diff's file diff into a FileChange: its operation
// and clean path, its modes, its hunks in file order. Errors name the file.
func fileChange(fd *diff.FileDiff) (*FileChange, error) {
	hdr, err := readExtended(fileName(fd), fd.Extended)
	if err != nil {
		return nil, err
	}
	fc, err := newFileChange(fd, hdr)
	if err != nil {
		return nil, err
	}
	if err := fc.readModes(hdr); err != nil {
		return nil, err
	}
	if len(fd.Hunks) == 0 && fc.Op == Modify && fc.NewMode == "" {
		return nil, fmt.Errorf("%s: the file diff has no hunks and changes no mode", fc.Path)
	}
	if err := fc.readHunks(fd.Hunks); err != nil {
		return nil, err
	}
	switch fc.Op {
	case Create:
		if len(fc.Hunks) > 1 || (len(fc.Hunks) == 1 && len(fc.Hunks[0].Old) != 0) {
			return nil, fmt.Errorf("%s: a created file must be one hunk with no old lines", fc.Path)
		}
	case Delete:
		if len(fc.Hunks) > 1 || (len(fc.Hunks) == 1 && len(fc.Hunks[0].New) != 0) {
			return nil, fmt.Errorf("%s: a deleted file must be one hunk with no new lines", fc.Path)
		}
	}
	return fc, nil
}

// newFileChange is fd's operation (create, delete or modify; a rename is
// refused) and its path, cleaned of git's a/ or b/ (cleanPath).
func newFileChange(fd *diff.FileDiff, hdr extended) (*FileChange, error) {
	fc := &FileChange{Op: Modify, Mode: "100644"}
	switch {
	case fd.OrigName == "/dev/null" || hdr.newFile != "":
		fc.Op = Create
		fc.Path = fd.NewName
	case fd.NewName == "/dev/null" || hdr.deletedFile != "":
		fc.Op = Delete
		fc.Path = fd.OrigName
	default:
		if stripAB(fd.OrigName, "a/") != stripAB(fd.NewName, "b/") {
			return nil, fmt.Errorf("%s: old and new names differ (%s, %s); renames are not supported", fileName(fd), fd.OrigName, fd.NewName)
		}
		fc.Path = fd.NewName
	}
	prefix := "b/"
	if fc.Op == Delete {
		prefix = "a/"
	}
	p, err := cleanPath(stripAB(fc.Path, prefix))
	if err != nil {
		return nil, err
	}
	fc.Path = p
	return fc, nil
}

// readModes takes the file's modes from its extended header: a created
// file's mode, a mode change (old and new mode, as a pair), and the old
// mode the headers claim (old mode, deleted file mode, index), which must
// agree. Each mode must be one git writes (checkMode).
func (fc *FileChange) readModes(hdr extended) error {
	if hdr.newFile != "" {
		fc.Mode = hdr.newFile
	}
	if hdr.oldMode != "" || hdr.newMode != "" {
		if fc.Op != Modify || hdr.oldMode == "" || hdr.newMode == "" {
			return fmt.Errorf("%s: \"old mode\" and \"new mode\" come as a pair, on a file that is neither created nor deleted", fc.Path)
		}
		if hdr.oldMode != hdr.newMode {
			fc.OldMode, fc.NewMode = hdr.oldMode, hdr.newMode
		}
	}
	for _, m := range []string{fc.Mode, fc.OldMode, fc.NewMode, hdr.deletedFile, hdr.indexMode} {
		if err := checkMode(m); err != nil {
			return fmt.Errorf("%s: %w", fc.Path, err)
		}
	}
	// Every header that claims the old mode claims the same one.
	claims := [][2]string{}
	if hdr.oldMode != "" {
		claims = append(claims, [2]string{hdr.oldMode, "old mode " + hdr.oldMode})
	}
	if hdr.deletedFile != "" {
		claims = append(claims, [2]string{hdr.deletedFile, "deleted file mode " + hdr.deletedFile})
	}
	if hdr.indexMode != "" {
		if fc.Op == Create {
			if hdr.indexMode != fc.Mode {
				return fmt.Errorf("%s: \"index ... %s\" disagrees with the created file's mode %s", fc.Path, hdr.indexMode, fc.Mode)
			}
		} else {
			claims = append(claims, [2]string{hdr.indexMode, "index ... " + hdr.indexMode})
		}
	}
	for _, c := range claims {
		if c[0] != claims[0][0] {
			return fmt.Errorf("%s: %q and %q claim different old modes", fc.Path, claims[0][1], c[1])
		}
	}
	if len(claims) > 0 {
		fc.ModeClaim, fc.ModeClaimBy = claims[0][0], claims[0][1]
	}
	return nil
}

// readHunks converts each hunk (convertHunk) and refuses hunks out of
// file order or overlapping.
func (fc *FileChange) readHunks(hunks []*diff.Hunk) error {
	lastEnd := 0
	for i, h := range hunks {
		hk, err := convertHunk(h)
		if err != nil {
			return fmt.Errorf("%s: %w", fc.Path, err)
		}
		// git apply places each hunk on the file as the hunks before it
		// left it and takes the new side's start only as a first guess,
		// so it accepts any new start. Hunks must come in file order and
		// not overlap, as git diff writes them: arpatch refuses hunks out
		// of order (git apply would take them).
		first := hk.OrigStart
		if hk.OrigLines == 0 {
			first++
		}
		if i > 0 && first <= lastEnd {
			return fmt.Errorf("%s: hunk %s is out of order: its old side starts at line %d, but the hunk before it reaches line %d; hunks must follow each other down the file without overlapping (regenerate the patch with git diff)", fc.Path, hk.Header, first, lastEnd)
		}
		if hk.OrigLines > 0 {
			lastEnd = hk.OrigStart + hk.OrigLines - 1
		} else {
			lastEnd = hk.OrigStart
		}
		fc.Hunks = append(fc.Hunks, hk)
	}
	return nil
}

func fileName(fd *diff.FileDiff) string {
	if fd.NewName != "/dev/null" {
		return fd.NewName
	}
	return fd.OrigName
}

func stripAB(name, prefix string) string {
	return strings.TrimPrefix(name, prefix)
}

// CleanPath checks a tree-relative path from a patch or a state file: it
// refuses absolute paths, backslashes, NUL, any path that leaves the tree,
// and any component that is .git or .arpatch in any letter case (git
// itself refuses .GIT, which is .git on case-insensitive file systems).
func CleanPath(p string) (string, error) {
	return cleanPath(p)
}

func cleanPath(p string) (string, error) {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q is not a relative slash-separated path", p)
	}
	c := path.Clean(p)
	if c != p || c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q leaves the tree or is not clean", p)
	}
	for _, part := range strings.Split(c, "/") {
		if strings.EqualFold(part, ".git") || strings.EqualFold(part, ".arpatch") {
			return "", fmt.Errorf("path %q enters %s, which a patch may not touch", p, part)
		}
	}
	return c, nil
}

// convertHunk turns go-diff's body into the byte-exact old and new lines.
func convertHunk(h *diff.Hunk) (*Hunk, error) {
	hk := &Hunk{
		Header:    fmt.Sprintf("@@ -%s +%s @@", HunkRange(int(h.OrigStartLine), int(h.OrigLines)), HunkRange(int(h.NewStartLine), int(h.NewLines))),
		OrigStart: int(h.OrigStartLine),
		OrigLines: int(h.OrigLines),
		NewStart:  int(h.NewStartLine),
		NewLines:  int(h.NewLines),
	}
	body := h.Body
	off := 0
	seenChange := false
	for off < len(body) {
		end := bytes.IndexByte(body[off:], '\n')
		next := len(body)
		hasNL := false
		if end >= 0 {
			next = off + end + 1
			hasNL = true
		}
		raw := body[off:next]
		// go-diff records the old side's "\ No newline at end of file" as an
		// offset just past the line; the new side's by dropping the newline.
		origNoNL := h.OrigNoNewlineAt > 0 && int(h.OrigNoNewlineAt) == next
		off = next
		if len(raw) == 0 {
			continue
		}
		kind := raw[0]
		text := string(raw[1:])
		if kind == '\n' || (kind == '\r' && len(raw) > 1 && raw[1] == '\n') {
			// A blank context line whose leading space was stripped.
			kind, text = ' ', string(raw)
		}
		withoutNL := strings.TrimSuffix(text, "\n")
		switch kind {
		case ' ':
			oldL, newL := text, text
			if !hasNL {
				oldL, newL = withoutNL, withoutNL
			}
			hk.Old = append(hk.Old, oldL)
			hk.New = append(hk.New, newL)
			if !seenChange {
				hk.Leading++
			}
			hk.Trailing++
		case '-':
			seenChange, hk.Trailing = true, 0
			l := text
			if origNoNL || !hasNL {
				l = withoutNL
			}
			hk.Old = append(hk.Old, l)
		case '+':
			seenChange, hk.Trailing = true, 0
			l := text
			if !hasNL {
				l = withoutNL
			}
			hk.New = append(hk.New, l)
		default:
			return nil, fmt.Errorf("hunk %s: unexpected line %q", hk.Header, raw)
		}
	}
	if err := hk.check(); err != nil {
		return nil, err
	}
	return hk, nil
}

// check refuses a hunk that changes nothing, has a range starting at line
// 0 that is not empty, a line without a newline before the last, or a
// body whose line counts disagree with its header.
func (hk *Hunk) check() error {
	if changed := strings.Join(hk.Old, "") != strings.Join(hk.New, ""); !changed {
		return fmt.Errorf("hunk %s: changes nothing", hk.Header)
	}
	if (hk.OrigStart == 0 && hk.OrigLines != 0) || (hk.NewStart == 0 && hk.NewLines != 0) {
		return fmt.Errorf("hunk %s: a range starting at line 0 must be empty", hk.Header)
	}
	for _, side := range [][]string{hk.Old, hk.New} {
		for i, l := range side {
			if l == "" || (i < len(side)-1 && !strings.HasSuffix(l, "\n")) {
				return fmt.Errorf("hunk %s: line %d has no newline but is not the file's last line", hk.Header, i+1)
			}
		}
	}
	if len(hk.Old) != hk.OrigLines || len(hk.New) != hk.NewLines {
		return fmt.Errorf("hunk %s: body has %d old and %d new lines, header says %d and %d",
			hk.Header, len(hk.Old), len(hk.New), hk.OrigLines, hk.NewLines)
	}
	return nil
}

// HunkRange is a hunk range as git writes it in an @@ line: "N" for one
// line, "N,M" else (M lines from line N). The engine's headers and
// port's drafts both write ranges with it.
func HunkRange(start, n int) string {
	if n == 1 {
		return strconv.Itoa(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
