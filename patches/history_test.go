package patches

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/textfmt"
)

// historyPaths are the directories of upstream's allreduce kernel and
// device communicators, in every era.
var historyPaths = []string{
	"sgl-kernel/csrc/allreduce",
	"python/sglang/kernels/aot/csrc/allreduce",
	"python/sglang/srt/distributed/device_communicators",
}

// TestRealHistoryAgainstGitApply is the documented run of
// docs/verification.md: for every commit C of a SGLang mirror's history
// (ARPATCH_SGLANG_MIRROR, ref ARPATCH_SGLANG_REF, default main) that
// touches historyPaths, it takes `git diff C^ C` for those paths and
// applies it with arpatch's engine and with git apply to C^, and to the
// trees of the 2nd, 5th, 10th and 20th earlier commits that touched them,
// where offsets and conflicts occur; accept/refuse and bytes must agree,
// or be a named stricter refusal. git diff detects renames unless
// ARPATCH_HISTORY_NO_RENAMES is set. CI has no mirror, so it skips there.
func TestRealHistoryAgainstGitApply(t *testing.T) {
	mirror := os.Getenv("ARPATCH_SGLANG_MIRROR")
	if mirror == "" {
		t.Skip("ARPATCH_SGLANG_MIRROR is not set (a local SGLang clone or mirror); skipping the real-history run")
	}
	needGit(t)
	ref := os.Getenv("ARPATCH_SGLANG_REF")
	if ref == "" {
		ref = "main"
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", mirror}, args...)...)
		cmd.Env = gitEnv(t.TempDir())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	commits := strings.Fields(git(append([]string{"log", "--no-merges", "--format=%H", ref, "--"}, historyPaths...)...))
	if len(commits) == 0 {
		t.Fatalf("no commit of %s touches %v", ref, historyPaths)
	}
	blobs := newBlobReader(t, mirror)
	defer blobs.close()
	dir := t.TempDir()
	counts := map[string]map[outcome]int{}
	var offsets, worst int
	for i, c := range commits {
		diffArgs := []string{"diff", "--no-color", "--no-ext-diff"}
		if os.Getenv("ARPATCH_HISTORY_NO_RENAMES") != "" {
			diffArgs = append(diffArgs, "--no-renames")
		}
		diffArgs = append(append(diffArgs, c+"^", c, "--"), historyPaths...)
		patch := git(diffArgs...)
		if patch == "" {
			continue
		}
		names := strings.Fields(git(append([]string{"diff", "--no-renames", "--name-only", c + "^", c, "--"}, historyPaths...)...))
		targets := []struct{ kind, rev string }{{"C^", c + "^"}}
		for _, k := range []int{2, 5, 10, 20} {
			if i+k < len(commits) {
				targets = append(targets, struct{ kind, rev string }{fmt.Sprintf("%d back", k), commits[i+k]})
			}
		}
		for _, tg := range targets {
			files := map[string]string{}
			for _, n := range names {
				if b, ok := blobs.read(tg.rev + ":" + n); ok {
					files[n] = b
				}
			}
			out, detail := compareWithGit(t, filepath.Join(dir, "tree"), files, patch)
			if counts[tg.kind] == nil {
				counts[tg.kind] = map[outcome]int{}
			}
			counts[tg.kind][out]++
			if strings.HasPrefix(string(out), "DISAGREE") {
				t.Errorf("%s applied to %s (%s): %s: %s", c[:12], tg.rev, tg.kind, out, textfmt.FirstLine(detail))
			}
			if out == bothApplySame {
				if d, err := ParseDiff("h", []byte(patch)); err == nil {
					if res, err := Apply(memTree(files), []*Patch{{Name: "h", Diff: d}}); err == nil {
						if o := (PatchFit{Hunks: res.Hunks}).MaxOffset(); o > 0 {
							offsets++
							worst = max(worst, o)
						}
					}
				}
			}
		}
	}
	var kinds []string
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(a, b int) bool { return kindOrder(kinds[a]) < kindOrder(kinds[b]) })
	t.Logf("%d commits of %s touching %v", len(commits), ref, historyPaths)
	for _, k := range kinds {
		var parts []string
		for o, n := range counts[k] {
			parts = append(parts, fmt.Sprintf("%d %s", n, o))
		}
		sort.Strings(parts)
		t.Logf("  %-8s %s", k, strings.Join(parts, "; "))
	}
	t.Logf("  applied with an offset: %d patches (largest %d lines)", offsets, worst)
}

func kindOrder(k string) int {
	if k == "C^" {
		return 0
	}
	n, _ := strconv.Atoi(strings.Fields(k)[0])
	return n
}

// blobReader reads "rev:path" objects through one git cat-file --batch.
type blobReader struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func newBlobReader(t *testing.T, repo string) *blobReader {
	cmd := exec.Command("git", "-C", repo, "cat-file", "--batch")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &blobReader{cmd: cmd, in: in, out: bufio.NewReader(out)}
}

func (b *blobReader) read(obj string) (string, bool) {
	if _, err := fmt.Fprintln(b.in, obj); err != nil {
		return "", false
	}
	hdr, err := b.out.ReadString('\n')
	if err != nil || strings.HasSuffix(hdr, "missing\n") {
		return "", false
	}
	f := strings.Fields(hdr)
	n, _ := strconv.Atoi(f[len(f)-1])
	buf := make([]byte, n+1)
	if _, err := io.ReadFull(b.out, buf); err != nil {
		return "", false
	}
	if f[1] != "blob" {
		return "", false
	}
	return string(bytes.TrimSuffix(buf, []byte("\n"))[:n]), true
}

func (b *blobReader) close() {
	// Closing git cat-file's stdin ends it; the reads already checked
	// what it answered.
	_ = b.in.Close()
	_ = b.cmd.Wait()
}
