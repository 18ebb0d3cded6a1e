package safefs

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, p, s string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.txt"), "A", 0o644)
	write(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "gone.txt"), "G", 0o600)
	write(t, filepath.Join(dir, "solo", "deep", "only.txt"), "O", 0o644)
	root := Root{Dir: dir}
	changes := []Change{
		{Path: "a.txt", Data: []byte("A2")},
		{Path: "run.sh", Data: []byte("#!/bin/sh\necho\n")},
		{Path: "gone.txt"},
		{Path: "solo/deep/only.txt"},
		{Path: "new/deep/n.txt", Data: []byte("N"), Mode: 0o755},
	}

	// Fail on the last change: everything before it is put back.
	Faults = func(op, rel string) error {
		if op == "write" && rel == "new/deep/n.txt" {
			return errors.New("disk full")
		}
		return nil
	}
	err := root.Write(changes)
	Faults = nil
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "restored") {
		t.Fatalf("err = %v, want the failure and a note that the tree was restored", err)
	}
	if read(t, filepath.Join(dir, "a.txt")) != "A" || read(t, filepath.Join(dir, "gone.txt")) != "G" || read(t, filepath.Join(dir, "solo/deep/only.txt")) != "O" {
		t.Error("files were not restored")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "gone.txt")); fi.Mode().Perm() != 0o600 {
		t.Errorf("restored mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("created directories were left behind")
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*arpatch*"))
	if len(leftovers) > 0 {
		t.Errorf("temp files left: %v", leftovers)
	}

	// Without the failure, all changes land; modes are kept or set.
	if err := root.Write(changes); err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(dir, "a.txt")) != "A2" || read(t, filepath.Join(dir, "new/deep/n.txt")) != "N" {
		t.Error("changes not written")
	}
	if _, err := os.Stat(filepath.Join(dir, "gone.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("gone.txt not deleted")
	}
	// Like git, deleting a directory's last file removes the directory.
	if _, err := os.Stat(filepath.Join(dir, "solo")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("solo/ left empty")
	}
	for p, want := range map[string]fs.FileMode{"run.sh": 0o755, "a.txt": 0o644, "new/deep/n.txt": 0o755} {
		if fi, _ := os.Stat(filepath.Join(dir, p)); fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
}

func TestRefusesPathsThatLeaveTheRoot(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "S", 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "ok.txt"), "ok", 0o644)
	root := Root{Dir: dir}
	for _, p := range []string{"link/secret", "../x", "/etc/passwd", "a/../../x", "a\\b"} {
		err := root.Write([]Change{{Path: "ok.txt", Data: []byte("changed")}, {Path: p, Data: []byte("x")}})
		var pe *PathError
		if !errors.As(err, &pe) {
			t.Errorf("%s: err = %v, want *PathError", p, err)
		}
		if _, err := root.ReadFile(p); !errors.As(err, &pe) {
			t.Errorf("ReadFile(%s): err = %v, want *PathError", p, err)
		}
	}
	if read(t, filepath.Join(dir, "ok.txt")) != "ok" || read(t, filepath.Join(outside, "secret")) != "S" {
		t.Error("a refused group still wrote something")
	}
	if _, err := root.ReadFile("missing.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}
}

func TestCanWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for p, ok := range map[string]bool{
		filepath.Join(dir, "new.json"):         true,
		filepath.Join(dir, "a", "b", "x.json"): true, // parents are made
		file:                                   true, // replaced
		dir:                                    false,
		filepath.Join(file, "x.json"):          false,
	} {
		if err := CanWrite(p); (err == nil) != ok {
			t.Errorf("CanWrite(%s) = %v", p, err)
		}
	}
}

// Issue 14 tester, G: WriteFile writes where the path leads. A symlink
// stays a link and its target (made when dangling) gets the bytes; a FIFO
// and a character device are written, not replaced; a socket and a
// directory are refused, and CanWrite judges each the same way.
func TestWriteFileFollowsWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	data := []byte("<testsuites/>\n")

	t.Run("symlink", func(t *testing.T) {
		target := filepath.Join(dir, "target.xml")
		if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "link.xml")
		if err := os.Symlink("target.xml", link); err != nil {
			t.Fatal(err)
		}
		if err := CanWrite(link); err != nil {
			t.Fatalf("CanWrite: %v", err)
		}
		if err := WriteFile(link, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("link.xml is no longer a symlink: %v %v", fi, err)
		}
		if b, _ := os.ReadFile(target); string(b) != string(data) {
			t.Errorf("target holds %q, want %q", b, data)
		}
	})

	t.Run("dangling symlink", func(t *testing.T) {
		link := filepath.Join(dir, "dangling.xml")
		if err := os.Symlink(filepath.Join(dir, "sub", "made.xml"), link); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(link, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("dangling.xml is no longer a symlink: %v %v", fi, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "sub", "made.xml")); string(b) != string(data) {
			t.Errorf("the link's target holds %q, want %q", b, data)
		}
	})

	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		if err := CanWrite(fifo); err != nil {
			t.Fatalf("CanWrite: %v", err)
		}
		got := make(chan []byte)
		go func() {
			b, _ := os.ReadFile(fifo)
			got <- b
		}()
		if err := WriteFile(fifo, data, 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-got:
			if string(b) != string(data) {
				t.Errorf("the reader got %q, want %q", b, data)
			}
		case <-time.After(10 * time.Second):
			t.Error("the FIFO's reader got nothing in 10 s")
		}
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("the FIFO was replaced: %v %v", fi, err)
		}
	})

	t.Run("character device", func(t *testing.T) {
		// As root a wrong WriteFile would replace /dev/null for the whole
		// machine: root writes to a null device of its own instead.
		dev := os.DevNull
		if os.Geteuid() == 0 {
			dev = filepath.Join(dir, "null")
			if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
				t.Skipf("mknod: %v", err)
			}
		}
		if err := CanWrite(dev); err != nil {
			t.Fatalf("CanWrite: %v", err)
		}
		if err := WriteFile(dev, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(dev); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("%s is no longer a character device: %v %v", dev, fi, err)
		}
	})

	t.Run("socket and directory refused", func(t *testing.T) {
		sock := filepath.Join(dir, "s")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Skipf("unix socket: %v", err)
		}
		defer func() { _ = l.Close() }() // the test is done with it; nothing to flush
		for p, what := range map[string]string{sock: "is a socket", dir: "is a directory"} {
			for name, err := range map[string]error{"WriteFile": WriteFile(p, data, 0o644), "CanWrite": CanWrite(p)} {
				if err == nil || !strings.Contains(err.Error(), p+" "+what) || what == "is a socket" && !strings.Contains(err.Error(), "name a file path") {
					t.Errorf("%s(%s) = %v, want a refusal saying it %s", name, p, err, what)
				}
			}
		}
		if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("the socket was replaced: %v %v", fi, err)
		}
	})
}

// TestWriteRestoresAfterImpossiblePaths: a write that fails because its
// path cannot exist (a name longer than the file system takes, a file
// under a file an earlier change writes) is rolled back fully: removing
// the file it never made is no failure of the rollback. A read under a
// file is a missing file (fs.ErrNotExist, and ENOTDIR's words).
func TestWriteRestoresAfterImpossiblePaths(t *testing.T) {
	for name, bad := range map[string][]Change{
		"name too long":         {{Path: "new/" + strings.Repeat("n", 300), Data: []byte("x")}},
		"under a file it makes": {{Path: "new", Data: []byte("n")}, {Path: "new/x", Data: []byte("x")}},
	} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "a.txt"), "A", 0o644)
		root := Root{Dir: dir}
		err := root.Write(append([]Change{{Path: "a.txt", Data: []byte("A2")}}, bad...))
		var we *WriteError
		if !errors.As(err, &we) || !we.Restored || read(t, filepath.Join(dir, "a.txt")) != "A" {
			t.Errorf("%s: %v (restored: %v)", name, err, we != nil && we.Restored)
		}
		if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: what it made is left", name)
		}
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.txt"), "A", 0o644)
	_, err := Root{Dir: dir}.ReadFile("a.txt/x")
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("read under a file: %v", err)
	}
}

// DirExists: a directory is one, a file, a missing path and a path
// through a symlink (to a directory inside or outside the root) are not.
func TestDirExists(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	for _, d := range []string{"pkg/sub"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "pkg/f.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"in": filepath.Join(dir, "pkg"), "out": outside} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	r := Root{Dir: dir}
	for rel, want := range map[string]bool{"pkg": true, "pkg/sub": true, "pkg/f.py": false, "pkg/none": false, "in": false, "in/sub": false, "out": false, "../" + filepath.Base(outside): false} {
		if got := r.DirExists(rel); got != want {
			t.Errorf("DirExists(%q) = %v, want %v", rel, got, want)
		}
	}
}
