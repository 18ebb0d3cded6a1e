package patches

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var hunkHeaderRe = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@`)

// gitHeaderPrefixes are the lines git writes between "diff --git" and
// "---": arpatch accepts them outside hunks (readExtended carries out or
// refuses each; binary patches are refused here, before their data).
var gitHeaderPrefixes = append([]string{
	"diff --git ", "index ", "new file mode ", "deleted file mode ", "old mode ", "new mode ",
}, renameCopyPrefixes...)

// renameCopyPrefixes are the git header lines of a rename or a copy,
// which readExtended refuses.
var renameCopyPrefixes = []string{
	"similarity index ", "dissimilarity index ", "rename from ", "rename to ", "rename old ", "rename new ", "copy from ", "copy to ",
}

// scanStructure walks the diff line by line and checks what go-diff
// tolerates: every line outside a hunk must be a file header, and every
// hunk must hold exactly the lines its header counts. It returns the
// number of hunks per file (in order), so the parse can be checked against
// it, or an error naming the line (1-based, counted from lineBase).
func scanStructure(body []byte, lineBase int) ([]int, error) {
	var counts []int
	lines := bytes.SplitAfter(body, []byte("\n"))
	oldLeft, newLeft := 0, 0
	inHunk := false
	file := "(no file header)"
	for i, raw := range lines {
		n := lineBase + i
		l := strings.TrimRight(string(raw), "\r\n")
		if len(raw) == 0 {
			continue
		}
		if inHunk {
			if strings.HasPrefix(l, `\ `) {
				continue // "\ No newline at end of file"
			}
			kind := byte(' ')
			if len(l) > 0 {
				kind = l[0]
			}
			switch kind {
			case ' ':
				oldLeft--
				newLeft--
			case '-':
				oldLeft--
			case '+':
				newLeft--
			default:
				return nil, fmt.Errorf("line %d: %q inside a hunk: hunk lines start with ' ', '-', '+' or '\\'", n, clip(l))
			}
			if oldLeft < 0 || newLeft < 0 {
				return nil, fmt.Errorf("line %d: the hunk holds more lines than its header counts", n)
			}
			if oldLeft == 0 && newLeft == 0 {
				inHunk = false
			}
			continue
		}
		switch {
		case strings.HasPrefix(l, `\ `):
			continue // marker right after a hunk's last line
		case strings.HasPrefix(l, "@@ "):
			m := hunkHeaderRe.FindStringSubmatch(l)
			if m == nil {
				return nil, fmt.Errorf("line %d: malformed hunk header %q", n, clip(l))
			}
			if len(counts) == 0 {
				return nil, fmt.Errorf("line %d: hunk before any file header", n)
			}
			oldLeft, newLeft = count(m[2]), count(m[4])
			counts[len(counts)-1]++
			inHunk = oldLeft > 0 || newLeft > 0
		case strings.HasPrefix(l, "--- "):
			if i+1 >= len(lines) || !strings.HasPrefix(string(lines[i+1]), "+++ ") {
				return nil, fmt.Errorf("line %d: %q is not followed by a \"+++ \" line", n, clip(l))
			}
			if i == 0 || !strings.HasPrefix(prevHeader(lines, i), "diff --git ") {
				counts = append(counts, 0)
			}
		case strings.HasPrefix(l, "+++ "):
		case strings.HasPrefix(l, "diff --git "):
			counts = append(counts, 0)
			file = strings.TrimPrefix(l, "diff --git ")
		case strings.HasPrefix(l, "GIT binary patch"), strings.HasPrefix(l, "Binary files ") && strings.HasSuffix(l, " differ"):
			return nil, fmt.Errorf("line %d: binary patches are not supported (%s: %q); a series carries text diffs only", n, file, clip(l))
		case hasAnyPrefix(l, gitHeaderPrefixes):
		default:
			return nil, fmt.Errorf("line %d: unexpected text %q outside a hunk; a patch holds only file headers and hunks", n, clip(l))
		}
	}
	if inHunk {
		return nil, fmt.Errorf("the last hunk ends early: %d old and %d new lines missing", oldLeft, newLeft)
	}
	return counts, nil
}

// prevHeader returns the nearest earlier line that starts a file section
// ("diff --git" or "--- "), or "".
func prevHeader(lines [][]byte, i int) string {
	for j := i - 1; j >= 0; j-- {
		l := string(lines[j])
		if strings.HasPrefix(l, "diff --git ") {
			return l
		}
		if strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "@@ ") || strings.HasPrefix(l, " ") || strings.HasPrefix(l, "+") || strings.HasPrefix(l, "-") {
			return ""
		}
	}
	return ""
}

func count(s string) int {
	if s == "" {
		return 1
	}
	n, _ := strconv.Atoi(s)
	return n
}

func hasAnyPrefix(s string, ps []string) bool {
	for _, p := range ps {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
