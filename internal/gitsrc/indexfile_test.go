package gitsrc

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// encodeIndex writes idx with go-git's encoder and appends the given
// extensions (signature, body) before a recomputed SHA-1 trailer.
func encodeIndex(t *testing.T, idx *index.Index, exts ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := index.NewEncoder(&buf).Encode(idx); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[:buf.Len()-20]
	for _, x := range exts {
		b = append(b, x[0]...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(x[1])))
		b = append(b, x[1]...)
	}
	sum := sha1.Sum(b)
	return append(b, sum[:]...)
}

// goGitIndex decodes b with go-git's decoder alone.
func goGitIndex(b []byte) (*index.Index, error) {
	idx := &index.Index{}
	return idx, index.NewDecoder(bytes.NewReader(b)).Decode(idx)
}

// decodeIndex gives what go-git's decoder gives, field for field, on
// the indexes it decodes itself (version 2 and 3, with a cache tree or
// none) and on those it hands to go-git (version 4, other extensions, a
// bad checksum, a truncated file).
func TestDecodeIndexMatchesGoGit(t *testing.T) {
	h := func(s string) plumbing.Hash { return plumbing.ComputeHash(plumbing.BlobObject, []byte(s)) }
	now := time.Unix(1764500000, 123456789)
	entries := func() []*index.Entry {
		return []*index.Entry{
			{Name: "a", Hash: h("a"), Mode: filemode.Regular, Size: 1, ModifiedAt: now, CreatedAt: now, Dev: 7, Inode: 99, UID: 1000, GID: 1000},
			{Name: "bin/run.sh", Hash: h("run"), Mode: filemode.Executable, Size: 10, ModifiedAt: now},
			{Name: "dir/link", Hash: h("target"), Mode: filemode.Symlink, Size: 6},
			{Name: "dir/sub/skipped.txt", Hash: h("s"), Mode: filemode.Regular, SkipWorktree: true},
			{Name: "new.txt", Mode: filemode.Regular, IntentToAdd: true},
			{Name: "eight..", Hash: h("8"), Mode: filemode.Regular},                                 // 62+7: one byte of padding
			{Name: strings.Repeat("long/", 900) + "name.txt", Hash: h("l"), Mode: filemode.Regular}, // over the 12-bit length
			{Name: "stage2.txt", Hash: h("ours"), Mode: filemode.Regular, Stage: index.OurMode},
		}
	}
	raw := func(s string) string { x := h(s); return string(x[:]) }
	tree := "\x004 2\n" + raw("root") + "bin\x001 0\n" + raw("bin") + "dir\x00-1 1\n" + "sub\x001 0\n" + raw("sub")
	cases := []struct {
		name string
		b    []byte
		fast bool // decoded here, not handed to go-git
	}{
		{"v2, no extension", encodeIndex(t, &index.Index{Version: 2, Entries: entries()[:3]}), true},
		{"v2, empty", encodeIndex(t, &index.Index{Version: 2}), true},
		{"v3, extended flags and a cache tree with an invalidated directory", encodeIndex(t, &index.Index{Version: 3, Entries: entries()}, [2]string{"TREE", tree}), true},
		{"v3, empty cache tree", encodeIndex(t, &index.Index{Version: 3, Entries: entries()}, [2]string{"TREE", ""}), true},
		{"v4", encodeIndex(t, &index.Index{Version: 4, Entries: entries()}), false},
		{"v2, an optional extension go-git skips", encodeIndex(t, &index.Index{Version: 2, Entries: entries()[:2]}, [2]string{"TREE", tree}, [2]string{"ZZZZ", "opaque"}), false},
		{"v2, a required extension go-git refuses", encodeIndex(t, &index.Index{Version: 2, Entries: entries()[:2]}, [2]string{"link", "x"}), false},
	}
	bad := encodeIndex(t, &index.Index{Version: 2, Entries: entries()[:2]})
	bad[len(bad)-1] ^= 1
	cases = append(cases, struct {
		name string
		b    []byte
		fast bool
	}{"bad checksum", bad, false})
	good := encodeIndex(t, &index.Index{Version: 2, Entries: entries()[:2]})
	cases = append(cases, struct {
		name string
		b    []byte
		fast bool
	}{"truncated", good[:40], false})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, werr := goGitIndex(c.b)
			got, _, err := decodeIndex(c.b)
			if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
				t.Fatalf("error %v, go-git's %v", err, werr)
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("decodeIndex:\n%+v\ngo-git:\n%+v", got, want)
			}
			if _, _, fast := decodeIndexFast(c.b); fast != c.fast {
				t.Errorf("decoded without go-git: %v, want %v", fast, c.fast)
			}
		})
	}
}

// On an index git wrote (with its cache tree, skip-worktree and
// intent-to-add entries), decodeIndex decodes it without go-git and
// gets go-git's values.
func TestDecodeIndexOfGitsIndex(t *testing.T) {
	needGit(t)
	dir := t.TempDir()
	for _, f := range []string{"a.txt", "d/b.txt", "d/e/c.txt"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitOut(t, dir, "init", "-q", "--template=") // no hooks or info/exclude: the index is what counts
	gitOut(t, dir, "add", ".")
	gitOut(t, dir, "write-tree") // records the cache tree
	gitOut(t, dir, "update-index", "--skip-worktree", "d/b.txt")
	if err := os.WriteFile(filepath.Join(dir, "n.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, dir, "add", "-N", "n.txt")
	b, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := goGitIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	got, _, fast := decodeIndexFast(b)
	if !fast {
		t.Fatalf("git's index (version %d) went to go-git", want.Version)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decodeIndex:\n%+v\ngo-git:\n%+v", got, want)
	}
	if want.Cache == nil || len(want.Entries) != 4 {
		t.Errorf("git's index has %d entries and cache tree %v; the test wants 4 and a tree", len(want.Entries), want.Cache)
	}
}
