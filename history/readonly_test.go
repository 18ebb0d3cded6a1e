package history

import (
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// asUserEnv makes this test binary, run as another user by asUser, do
// one thing with the history at its value (asUserMain) and exit.
const asUserEnv = "ARPATCH_HISTORY_AS_USER"

// asUserMain is the test binary run as another user: "read:PATH" lists
// PATH's runs (OpenRead, then Close) and prints how many; "write:PATH"
// records a run in it (Open). It prints the error, if any, and returns
// the exit code.
func asUserMain(arg string) int {
	what, path, _ := strings.Cut(arg, ":")
	err := func() error {
		if what == "read" {
			s, err := OpenRead(path)
			if err != nil {
				return err
			}
			runs, err := s.Runs(0)
			if cerr := s.Close(); err == nil {
				err = cerr
			}
			fmt.Printf("%d runs\n", len(runs))
			return err
		}
		s, err := Open(path)
		if err != nil {
			return err
		}
		id, err := s.BeginRun(Run{HardwareKey: "8x GPU"})
		if err == nil {
			err = s.FinishRun(id, Complete, 0, "no regression")
		}
		if cerr := s.Close(); err == nil {
			err = cerr
		}
		fmt.Println("wrote")
		return err
	}()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

// asUser runs this test binary as the user name (copied where that user
// can run it) with asUserEnv=arg, and returns its output. It skips t,
// saying why, unless this process is root (only root runs a process as
// another user) and the user exists.
func asUser(t *testing.T, name, arg string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running a reader as another user needs root")
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Skipf("no user %s: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	exe := userExe(t)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), asUserEnv+"="+arg)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// userExe is a copy of this test binary that every user can run.
func userExe(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	must(t, err)
	dir, err := os.MkdirTemp("", "arpatch-history-exe-")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	exe := filepath.Join(dir, "history.test")
	in, err := os.Open(self)
	must(t, err)
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	must(t, out.Close())
	return exe
}

// sharedDir makes a directory with mode perm that other users can reach.
func sharedDir(t *testing.T, perm os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "arpatch-history-ro-")
	must(t, err)
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755); _ = os.RemoveAll(dir) })
	must(t, os.Chmod(dir, perm))
	return dir
}

// history3 makes a history of 3 runs at dir/h.db and removes its -wal
// and -shm, as a backup that copied only the database has none.
func history3(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "h.db")
	s, err := Open(p)
	must(t, err)
	seed(t, s, 3, 90)
	must(t, s.Close())
	for _, f := range []string{p + "-wal", p + "-shm"} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return p
}

// TestReadOnlyDirectory: a history without its -wal and -shm in a
// directory its reader cannot write (a backup, a read-only mount) is
// read, and nothing is created beside it.
func TestReadOnlyDirectory(t *testing.T) {
	dir := sharedDir(t, 0o755)
	p := history3(t, dir)
	must(t, os.Chmod(dir, 0o555))
	out, err := asUser(t, "nobody", "read:"+p)
	if err != nil || out != "3 runs" {
		t.Fatalf("reading %s from a read-only directory: %q, %v", p, out, err)
	}
	ents, err := os.ReadDir(dir)
	must(t, err)
	if len(ents) != 1 {
		t.Errorf("files beside the history after the read: %v", ents)
	}
}

// TestReadLeavesNoFilesTheOwnerCannotWrite: another user's read of a
// history in a directory both may write (its -wal and -shm gone) leaves
// no -wal or -shm of that user's behind, so the owner's next nightly
// still writes it; with the two files there, the read uses them as they
// are. A history with commits in a -wal and no -shm that the reader
// cannot create is refused, naming the remedy.
func TestReadLeavesNoFilesTheOwnerCannotWrite(t *testing.T) {
	owner, err := user.Lookup("postgres")
	if err != nil {
		t.Skipf("no second user to own the history: %v", err)
	}
	dir := sharedDir(t, 0o777)
	p := history3(t, dir)
	uid, _ := strconv.Atoi(owner.Uid)
	gid, _ := strconv.Atoi(owner.Gid)
	must(t, os.Chown(p, uid, gid))
	if out, err := asUser(t, "nobody", "read:"+p); err != nil || out != "3 runs" {
		t.Fatalf("nobody's read: %q, %v", out, err)
	}
	for _, f := range []string{p + "-wal", p + "-shm"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was left by nobody's read", f)
		}
	}
	if out, err := asUser(t, "postgres", "write:"+p); err != nil || out != "wrote" {
		t.Fatalf("the owner's write after nobody's read: %q, %v", out, err)
	}
	// The owner's open left the two files (theirs): a read uses them.
	if out, err := asUser(t, "nobody", "read:"+p); err != nil || out != "4 runs" {
		t.Errorf("nobody's read with the owner's -wal and -shm: %q, %v", out, err)
	}
	if out, err := asUser(t, "postgres", "write:"+p); err != nil || out != "wrote" {
		t.Errorf("the owner's second write: %q, %v", out, err)
	}

	// A crash before the checkpoint: a -wal holding a commit (a sixth
	// run) that the file lacks, and no -shm. Another user's read is
	// refused with a remedy; the remedy, run as printed by the owner,
	// lets that read see the commit.
	crash := filepath.Join(dir, "crash.db")
	walWithACommit(t, p, crash)
	must(t, os.Chown(crash, uid, gid))
	must(t, os.Chown(crash+"-wal", uid, gid))
	out, err := asUser(t, "nobody", "read:"+crash)
	want := "its write-ahead log " + crash + "-wal holds commits not yet in it, and there is no " + crash + "-shm, which this user cannot create: " +
		"open it once as its owner (arpatch history list --db " + crash + "), or copy it and its -wal where you can write"
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("a -wal with commits and no -shm: %q, %v; want %q", out, err, want)
	}
	if out, err := asUser(t, "postgres", "read:"+crash); err != nil || out != "6 runs" {
		t.Fatalf("the owner's read, the remedy: %q, %v", out, err)
	}
	if out, err := asUser(t, "nobody", "read:"+crash); err != nil || out != "6 runs" {
		t.Errorf("nobody's read after the remedy: %q, %v; want the run in the -wal too", out, err)
	}
}

// walWithACommit copies the history at src to dst with a -wal holding
// one more run that dst itself lacks and no -shm, as a crash between a
// commit and its checkpoint leaves them: the copy is taken while a
// connection that never checkpoints has the commit in its -wal.
func walWithACommit(t *testing.T, src, dst string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "w.db")
	copyFile(t, src, tmp)
	db, err := sql.Open("sqlite", "file:"+tmp+"?_pragma=wal_autocheckpoint(0)")
	must(t, err)
	defer func() { must(t, db.Close()) }()
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`PRAGMA journal_mode=WAL`)
	must(t, err)
	_, err = db.Exec(`INSERT INTO runs (started_at, status, pid, hardware_key) VALUES ('2026-01-01T03:00:00Z', 'complete', 1, '8x GPU')`)
	must(t, err)
	copyFile(t, tmp, dst)
	copyFile(t, tmp+"-wal", dst+"-wal")
}

// copyFile copies the file src to dst (mode 0644).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.WriteFile(dst, b, 0o644))
}

// An immutable read whose file changed under it fails at Close, saying
// what was read cannot be trusted.
func TestImmutableReadSeesAChange(t *testing.T) {
	p := filepath.Join(t.TempDir(), "h.db")
	must(t, os.WriteFile(p, []byte("one"), 0o644))
	fi, err := os.Stat(p)
	must(t, err)
	must(t, checkGuard(p, fi))
	must(t, os.WriteFile(p, []byte("two!"), 0o644))
	must(t, os.Chtimes(p, time.Now(), fi.ModTime().Add(time.Second)))
	if err := checkGuard(p, fi); err == nil || !strings.Contains(err.Error(), "changed while it was read (a nightly wrote it)") {
		t.Errorf("checkGuard after a change: %v", err)
	}
}
