package kernels

import (
	"archive/zip"
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The fake toolchain's zipper (testdata/fakebin/fakezip) writes archives
// that archive/zip reads back with every CRC-32 checked, entries small
// (the shell's own CRC), empty, and large (gzip's trailer and cat: the
// 2.5 MB .so a fake build of SGLang's real tree links), in the order
// given, with SOURCE_DATE_EPOCH's time and each file's mode.
func TestFakeZip(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(28, 1))
	files := []struct {
		name string
		size int
		mode os.FileMode
	}{{"a/WHEEL", 80, 0o644}, {"a/empty", 0, 0o644}, {"sgl_kernel/common_ops.abi3.so", 2_500_000, 0o755}, {"a/edge", 4096, 0o644}, {"a/past-edge", 4097, 0o600}}
	args := []string{filepath.Join(dir, "out.whl")}
	want := map[string][]byte{}
	for i, f := range files {
		b := make([]byte, f.size)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		p := filepath.Join(dir, "file "+string(rune('0'+i))) // a space in the path
		if err := os.WriteFile(p, b, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		want[f.name] = b
		args = append(args, f.name+"="+p)
	}
	cmd := exec.Command(filepath.Join("testdata", "fakebin", "fakezip"), args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fakezip: %v\n%s", err, out)
	}
	zr, err := zip.OpenReader(args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = zr.Close() }() // read-only
	if len(zr.File) != len(files) {
		t.Fatalf("%d entries, want %d", len(zr.File), len(files))
	}
	for i, zf := range zr.File {
		f := files[i]
		rc, err := zf.Open()
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc) // checks the CRC-32 at EOF
		_ = rc.Close()
		if err != nil || zf.Name != f.name || !bytes.Equal(got, want[f.name]) || zf.Mode().Perm() != f.mode ||
			zf.Modified.Format(time.DateTime) != "2023-11-14 22:13:20" { // SOURCE_DATE_EPOCH in UTC, as a DOS time
			t.Errorf("entry %d: %s (%v), %d bytes, mode %v, time %v; want %s, %d bytes, mode %v", i, zf.Name, err, len(got), zf.Mode().Perm(), zf.Modified, f.name, f.size, f.mode)
		}
	}
}
