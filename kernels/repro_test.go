package kernels

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arpatch/arpatch/internal/digest"
	"golang.org/x/sys/unix"
)

func TestLaunchArgs(t *testing.T) {
	env := map[string]string{
		GencodeEnv:   "120a",
		PrefixMapEnv: "/tmp/b=/arpatch;/tmp/b/x/site=/torch-site",
		ObjTempEnv:   "1",
	}
	get := func(k string) string { return env[k] }
	out, kept, err := LaunchArgs([]string{"/usr/local/cuda/bin/nvcc", "-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_120a,code=sm_120a", "-c", "/tmp/b/k.cu", "-o", "/tmp/b/x/site/k.o"}, get)
	want := "/usr/local/cuda/bin/nvcc -Xcompiler -ffile-prefix-map=/tmp/b=/arpatch -Xcompiler -fdebug-prefix-map=/tmp/b=/arpatch " +
		"-Xcompiler -ffile-prefix-map=/tmp/b/x/site=/torch-site -Xcompiler -fdebug-prefix-map=/tmp/b/x/site=/torch-site " +
		"-Xcompiler -frandom-seed=/torch-site/k.o --objdir-as-tempdir -gencode=arch=compute_120a,code=sm_120a -c /tmp/b/k.cu -o /tmp/b/x/site/k.o"
	if err != nil || strings.Join(out, " ") != want || len(kept) != 1 || kept[0] != "120a" {
		t.Errorf("nvcc:\n got %s (kept %v, %v)\nwant %s", strings.Join(out, " "), kept, err, want)
	}
	// A host compiler gets the flags directly; nvcc's own options only
	// with nvcc.
	env[ObjTempEnv] = ""
	out, _, _ = LaunchArgs([]string{"c++", "-O3", "-c", "a.cc", "-o", "/tmp/b/a.o"}, get)
	want = "c++ -ffile-prefix-map=/tmp/b=/arpatch -fdebug-prefix-map=/tmp/b=/arpatch -ffile-prefix-map=/tmp/b/x/site=/torch-site -fdebug-prefix-map=/tmp/b/x/site=/torch-site -frandom-seed=/arpatch/a.o -O3 -c a.cc -o /tmp/b/a.o"
	if strings.Join(out, " ") != want {
		t.Errorf("c++:\n got %s\nwant %s", strings.Join(out, " "), want)
	}
	// Without the maps (a launcher run by hand), only the filter applies.
	env[PrefixMapEnv] = ""
	if out, _, _ = LaunchArgs([]string{"nvcc", "-c", "a.cu"}, get); strings.Join(out, " ") != "nvcc -c a.cu" {
		t.Errorf("no maps: %q", out)
	}
	env[GencodeEnv] = "bogus"
	if _, _, err := LaunchArgs([]string{"nvcc"}, get); err == nil || !strings.Contains(err.Error(), "$"+GencodeEnv) {
		t.Errorf("bad arch list: %v", err)
	}
}

// TestPlanIsReproducible checks what a plan sets: the commit's time, the
// locale and timezone, the fixed build path outside the user's
// directories, the maps, and the launcher for the host compiler too; and
// that the build root is in the key.
func TestPlanIsReproducible(t *testing.T) {
	e := newEnv(t)
	p := mustPlan(t, e.opts())
	r := p.Inputs.Repro
	if r == nil || r.SourceDateEpoch != 1775217600 || r.TZ != "UTC" || r.Locale != "C" || r.Scheme != ReproScheme {
		t.Fatalf("repro = %+v", r)
	}
	root := getenv(e.env, BuildRootEnv)
	if p.BuildPath != filepath.Join(root, p.Inputs.BuildID()) || p.Dir != filepath.Join(p.BuildPath, "sglang", "sgl-kernel") {
		t.Errorf("build path %s, dir %s", p.BuildPath, p.Dir)
	}
	for k, v := range map[string]string{"SOURCE_DATE_EPOCH": "1775217600", "TZ": "UTC", "LC_ALL": "C", ObjTempEnv: "1", PrefixMapEnv: p.BuildPath + "=/arpatch"} {
		if !strings.Contains(p.Env[k], v) {
			t.Errorf("env %s = %q, want %q in it", k, p.Env[k], v)
		}
	}
	if !strings.HasPrefix(p.Env["CMAKE_ARGS"], "-DCMAKE_C_COMPILER_LAUNCHER=/opt/arpatch;gencode-filter -DCMAKE_CXX_COMPILER_LAUNCHER=/opt/arpatch;gencode-filter ") {
		t.Errorf("CMAKE_ARGS = %s", p.Env["CMAKE_ARGS"])
	}
	if !strings.Contains(strings.Join(p.Argv, " "), "-Cbuild-dir="+p.BuildPath+"/build") {
		t.Errorf("argv = %q", p.Argv)
	}
	other := mustPlan(t, e.with(BuildRootEnv+"=/var/tmp/arpatch").opts())
	if other.Key == p.Key || other.BuildPath != "/var/tmp/arpatch/"+other.Inputs.BuildID() {
		t.Errorf("another build root: key same %v, path %s", other.Key == p.Key, other.BuildPath)
	}
	if _, err := PlanBuild(context.Background(), e.with(BuildRootEnv+"=relative/dir").opts()); err == nil || !strings.Contains(err.Error(), BuildRootEnv+`="relative/dir": the build root must be an absolute path`) {
		t.Errorf("relative root: %v", err)
	}
}

// TestBuildsInTwoDirectoriesAreIdentical builds the same inputs twice:
// from two checkouts in different directories, into two caches, under
// two build roots, at two times and with two umasks. The fake compilers
// embed their working directory, the source path, the time, a temp name
// and a random seed unless the maps, SOURCE_DATE_EPOCH,
// --objdir-as-tempdir and -frandom-seed are given: the wheels must still
// be byte-identical.
func TestBuildsInTwoDirectoriesAreIdentical(t *testing.T) {
	e := newEnv(t)
	// The control: run plainly, the fake compiler leaks all of it.
	dir1, dir2 := t.TempDir(), t.TempDir()
	var plain [2]string
	for i, d := range []string{dir1, dir2} {
		cmd := exec.Command(filepath.Join(e.fake, "nvcc"), "-c", filepath.Join(d, "k.cu"), "-o", filepath.Join(d, "k.o"))
		cmd.Dir = d
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		plain[i] = readFile(t, filepath.Join(d, "k.o"))
	}
	contains(t, plain[0], "cwd "+dir1, "tmp /tmp/tmpxft_")
	if plain[0] == plain[1] {
		t.Fatal("the fake compiler gives the same bytes in two directories: the test would prove nothing")
	}

	b := e.with(BuildRootEnv + "=" + filepath.Join(t.TempDir(), "other-root"))
	src2 := filepath.Join(t.TempDir(), "elsewhere", "sglang")
	e.apply(t, src2, "", nil)
	var wheels [2][]byte
	var keys [2]string
	for i, x := range []struct {
		e   *env
		src string
	}{{e, e.src}, {b, src2}} {
		o := x.e.withLauncher(x.e.opts())
		o.Src = x.src
		if i == 1 {
			old := syscall.Umask(0o002)
			defer syscall.Umask(old)
			time.Sleep(10 * time.Millisecond)
		}
		p := mustPlan(t, o)
		res, err := Build(context.Background(), p, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = p.Key
		wheels[i], _ = os.ReadFile(res.Wheel)
		if names := objectNames(res.Manifest.Objects); names != "CMakeFiles/common_ops.dir/csrc/allreduce/custom_all_reduce.cu.o CMakeFiles/common_ops.dir/csrc/common_extension.cc.o" {
			t.Errorf("objects = %s", names)
		}
	}
	if keys[0] == keys[1] {
		t.Error("two build roots gave one key")
	}
	if !bytes.Equal(wheels[0], wheels[1]) {
		t.Fatalf("two builds of the same inputs differ:\n%+v", compareBytes("wheel", wheels[0], wheels[1]))
	}
	so := zipMember(t, wheels[0], "sgl_kernel/common_ops.abi3.so")
	contains(t, so, "compiled by fake nvcc\nsource /arpatch/sglang/sgl-kernel/csrc/allreduce/custom_all_reduce.cu\ncwd /arpatch/sglang/sgl-kernel\ntime 1775217600\n",
		"tmp /arpatch/build/CMakeFiles/common_ops.dir/csrc/allreduce/x.cudafe1.cpp\nseed /arpatch/build/CMakeFiles/common_ops.dir/csrc/allreduce/custom_all_reduce.cu.o\n",
		"compiled by fake c++\nsource /arpatch/sglang/sgl-kernel/csrc/common_extension.cc\n", "seed /arpatch/build/CMakeFiles/common_ops.dir/csrc/common_extension.cc.o\n")
	zr, _ := zip.NewReader(bytes.NewReader(wheels[0]), int64(len(wheels[0])))
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name+" "+f.Mode().String()+" "+f.Modified.UTC().Format(time.RFC3339))
	}
	want := "sgl_kernel/build_info.txt -rw-r--r-- 2026-04-03T12:00:00Z|sgl_kernel/common_ops.abi3.so -rwxr-xr-x 2026-04-03T12:00:00Z|" +
		"sglang_kernel-0.4.1.dist-info/METADATA -rw-r--r-- 2026-04-03T12:00:00Z|sglang_kernel-0.4.1.dist-info/WHEEL -rw-r--r-- 2026-04-03T12:00:00Z|" +
		"sglang_kernel-0.4.1.dist-info/RECORD -rw-r--r-- 2026-04-03T12:00:00Z"
	if got := strings.Join(names, "|"); got != want {
		t.Errorf("wheel entries:\n got %s\nwant %s", got, want)
	}
	record := zipMember(t, wheels[0], "sglang_kernel-0.4.1.dist-info/RECORD")
	if !strings.HasPrefix(record, "sgl_kernel/build_info.txt,sha256=") || strings.Contains(record, "sha256=fake") || !strings.HasSuffix(record, "sglang_kernel-0.4.1.dist-info/RECORD,,\n") {
		t.Errorf("RECORD = %q", record)
	}
	// The fixed build path is gone after the build.
	if ents, _ := os.ReadDir(getenv(e.env, BuildRootEnv)); len(ents) != 0 {
		t.Errorf("left in the build root: %v", ents)
	}
}

func zipMember(t *testing.T, zipBytes []byte, name string) string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(zipBytes), int64(len(zipBytes)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		if f.Name == name {
			b, err := readEntry(f)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatalf("no %s in the archive", name)
	return ""
}

// TestNormalizeWheel normalises two archives of the same files written
// differently (order, times, modes, RECORD's order and hashes) into one.
func TestNormalizeWheel(t *testing.T) {
	type entry struct {
		name, body string
		mode       os.FileMode
	}
	files := []entry{
		{"pkg/__init__.py", "x = 1\n", 0o664},
		{"pkg/lib.so", "\x7fELF...", 0o775},
		{"pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n", 0o600},
		{"pkg-1.0.dist-info/RECORD", "pkg/lib.so,sha256=stale,3\npkg/__init__.py,,\npkg-1.0.dist-info/RECORD,,\n", 0o644},
	}
	write := func(order []int, when time.Time, method uint16) string {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for _, i := range order {
			fh := &zip.FileHeader{Name: files[i].name, Method: method, Modified: when}
			fh.SetMode(files[i].mode)
			w, _ := zw.CreateHeader(fh)
			if _, err := w.Write([]byte(files[i].body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "pkg-1.0-py3-none-any.whl")
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write([]int{3, 1, 0, 2}, time.Now(), zip.Deflate)
	b := write([]int{0, 2, 1, 3}, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), zip.Deflate)
	for _, p := range []string{a, b} {
		if err := NormalizeWheel(p, 1775217600); err != nil {
			t.Fatal(err)
		}
	}
	ab, bb := readFile(t, a), readFile(t, b)
	if ab != bb {
		t.Fatalf("normalised wheels differ: %+v", CompareFiles("wheel", a, b))
	}
	zr, _ := zip.NewReader(strings.NewReader(ab), int64(len(ab)))
	var got []string
	for _, f := range zr.File {
		got = append(got, f.Name+" "+f.Mode().String())
	}
	if strings.Join(got, ",") != "pkg/__init__.py -rw-r--r--,pkg/lib.so -rwxr-xr-x,pkg-1.0.dist-info/WHEEL -rw-r--r--,pkg-1.0.dist-info/RECORD -rw-r--r--" {
		t.Errorf("entries = %q", got)
	}
	// RECORD: urlsafe-base64 sha256 without padding, and sizes, in entry
	// order; sha256("x = 1\n") is known.
	want := "pkg/__init__.py,sha256=" + b64sha("x = 1\n") + ",6\npkg/lib.so,sha256=" + b64sha("\x7fELF...") + ",7\npkg-1.0.dist-info/WHEEL,sha256=" +
		b64sha("Wheel-Version: 1.0\n") + ",19\npkg-1.0.dist-info/RECORD,,\n"
	if r := zipMember(t, []byte(ab), "pkg-1.0.dist-info/RECORD"); r != want {
		t.Errorf("RECORD:\n%s\nwant\n%s", r, want)
	}
	if b64sha("x = 1\n") != "nia_NpkRxFwkPGhBR7I_yeHc_PJX0pmhxjIBam_NM_Q" {
		t.Errorf("b64sha is off: %s", b64sha("x = 1\n"))
	}
	// Not a zip: refused, naming the file, left as it was.
	bad := filepath.Join(t.TempDir(), "x.whl")
	if err := os.WriteFile(bad, []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := NormalizeWheel(bad, 0); err == nil || !strings.Contains(err.Error(), bad) || readFile(t, bad) != "not a zip" {
		t.Errorf("not a zip: %v", err)
	}
}

// elfWithRodataChanged returns a small ELF object, shaped as a compiler
// writes one (an x86-64 relocatable with .text, .rodata and the section
// name table), and a copy with one byte of its .rodata flipped.
func elfWithRodataChanged(t *testing.T) (orig, changed []byte) {
	t.Helper()
	text := []byte("\x55\x48\x89\xe5\x31\xc0\x5d\xc3\x90\x90\x90\x90\x90\x90\x90\x90")
	rodata := []byte("arpatch fixture .rodata: 0123456789abcdef\x00")
	names := []byte("\x00.text\x00.rodata\x00.shstrtab\x00")
	const hdr = 64
	textOff := uint64(hdr)
	rodataOff := textOff + uint64(len(text))
	namesOff := rodataOff + uint64(len(rodata))
	shoff := (namesOff + uint64(len(names)) + 7) &^ 7
	var b bytes.Buffer
	h := elf.Header64{
		Type: uint16(elf.ET_REL), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Shoff: shoff, Ehsize: hdr, Shentsize: 64, Shnum: 4, Shstrndx: 3,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	sections := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC | elf.SHF_EXECINSTR), Off: textOff, Size: uint64(len(text)), Addralign: 16},
		{Name: 7, Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC), Off: rodataOff, Size: uint64(len(rodata)), Addralign: 8},
		{Name: 15, Type: uint32(elf.SHT_STRTAB), Off: namesOff, Size: uint64(len(names)), Addralign: 1},
	}
	for _, part := range []any{h, text, rodata, names, make([]byte, shoff-namesOff-uint64(len(names))), sections} {
		if err := binary.Write(&b, binary.LittleEndian, part); err != nil {
			t.Fatal(err)
		}
	}
	orig = b.Bytes()
	changed = bytes.Clone(orig)
	changed[rodataOff+uint64(len(rodata))/2] ^= 0xff
	return orig, changed
}

// TestCompareFilesShowsWhere plants one changed byte in a section of an
// ELF object and one changed line in a text file.
func TestCompareFilesShowsWhere(t *testing.T) {
	orig, changed := elfWithRodataChanged(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.so"), orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.so"), changed, 0o644); err != nil {
		t.Fatal(err)
	}
	d := CompareFiles("lib.so", filepath.Join(dir, "a.so"), filepath.Join(dir, "b.so"))
	if len(d) != 1 || d[0].Detail != "ELF sections that differ: .rodata" || d[0].A == d[0].B {
		t.Errorf("ELF: %+v", d)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.txt"), []byte("one\n2\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d = CompareFiles("x.txt", filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt"))
	if len(d) != 1 || !strings.Contains(d[0].Detail, "-two\n+2\n") {
		t.Errorf("text: %+v", d)
	}
	if d := CompareFiles("same", filepath.Join(dir, "a.txt"), filepath.Join(dir, "a.txt")); len(d) != 0 {
		t.Errorf("identical files: %+v", d)
	}
}

func b64sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// TestVerifyReproducible rebuilds a cached entry: identical first; then,
// with a nondeterminism planted in one translation unit, the report names
// the wheel, the shared object inside it with a diff of the planted line,
// and that unit's object, and nothing else.
func TestVerifyReproducible(t *testing.T) {
	e := newEnv(t)
	o := e.withLauncher(e.opts())
	p := mustPlan(t, o)
	if _, err := VerifyReproducible(context.Background(), p, o, nil); err == nil || !strings.Contains(err.Error(), "no cache entry for key "+digest.Short(p.Key)+" ") {
		t.Fatalf("verify before any build: %v", err)
	}
	res, err := Build(context.Background(), p, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyReproducible(context.Background(), p, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Reproducible() || strings.Join(rep.Same, "|") != filepath.Base(res.Wheel)+"|2 of 2 objects" || rep.Kept != "" {
		t.Errorf("identical rebuild: same %q, differences %+v", rep.Same, rep.Differences)
	}

	n := e.with("FAKE_NONDET_TU=custom_all_reduce.cu")
	o = n.withLauncher(n.opts())
	p = mustPlan(t, o)
	if _, err := Build(context.Background(), p, o, nil); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, filepath.Join(o.Cache.EntryDir(p.Key), "manifest.json"))
	rep, err = VerifyReproducible(context.Background(), p, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(rep.Kept) }() // kept in the system temp dir, outside t.TempDir
	whl := "sglang_kernel-0.4.1-cp310-abi3-linux_x86_64.whl"
	var files []string
	for _, d := range rep.Differences {
		files = append(files, d.File)
	}
	want := "object CMakeFiles/common_ops.dir/csrc/allreduce/custom_all_reduce.cu.o|" + whl + "!sgl_kernel/common_ops.abi3.so|" + whl + "!sglang_kernel-0.4.1.dist-info/RECORD|" + whl
	if rep.Reproducible() || strings.Join(files, "|") != want {
		t.Fatalf("differences:\n got %s\nwant %s", strings.Join(files, "|"), want)
	}
	if d := rep.Differences[3].Detail; d != "files inside that differ: sgl_kernel/common_ops.abi3.so, sglang_kernel-0.4.1.dist-info/RECORD" {
		t.Errorf("wheel detail: %s", d)
	}
	if d := rep.Differences[1].Detail; !strings.HasPrefix(d, "--- first/"+whl+"!sgl_kernel/common_ops.abi3.so\n") || !strings.Contains(d, "\n-nondeterministic ") || !strings.Contains(d, "\n+nondeterministic ") {
		t.Errorf("no diff of the planted line: %s", d)
	}
	if strings.Join(rep.Same, "|") != "1 of 2 objects" {
		t.Errorf("same = %q", rep.Same)
	}
	if _, err := os.Stat(filepath.Join(rep.Kept, whl)); err != nil {
		t.Errorf("the rebuilt wheel is not kept for inspection: %v", err)
	}
	if after := readFile(t, filepath.Join(o.Cache.EntryDir(p.Key), "manifest.json")); after != before {
		t.Error("verify changed the cache entry")
	}
}

// TestBuildPathInUse: a build path another live build holds (its lock
// names a live pid: this test's) is waited for, as cargo waits for its
// build directory, saying so once; the build then runs when the holder
// lets go. Past LockWait it is refused, naming the pid, the time waited,
// the flag and the lock; an interrupt ends the wait; nothing is built or
// cached meanwhile.
func TestBuildPathInUse(t *testing.T) {
	defer func(d time.Duration) { lockPoll = d }(lockPoll)
	lockPoll = 5 * time.Millisecond
	e := newEnv(t)
	o := e.opts()
	p := mustPlan(t, o)
	lock := p.BuildPath + ".lock"
	hold := func() {
		if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lock, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pid := strconv.Itoa(os.Getpid())

	// No wait at all (LockWait 0): refused at once.
	hold()
	_, err := Build(context.Background(), p, o, nil)
	want := "another build (pid " + pid + ") is using the fixed build path " + p.BuildPath + "; wait for it to finish, or pass --lock-timeout to wait for it (if no arpatch runs as that pid, remove " + lock + ")"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	// Waiting up to 50 ms for a holder that stays: refused after the wait.
	o.LockWait = 50 * time.Millisecond
	var log bytes.Buffer
	o.Log = &log
	_, err = Build(context.Background(), p, o, nil)
	if err == nil || !strings.Contains(err.Error(), "another build (pid "+pid+") is using the fixed build path "+p.BuildPath+" after 50ms of waiting (--lock-timeout); run this build when it is done") {
		t.Fatalf("after the wait: %v", err)
	}
	if got := log.String(); got != "Blocking waiting for file lock on the fixed build path "+p.BuildPath+": another build (pid "+pid+") is using it; waiting up to 50ms (--lock-timeout)\n" {
		t.Errorf("log: %q", got)
	}
	if ents, _ := e.cache.List(); len(ents) != 0 {
		t.Error("a refused build left a cache entry")
	}
	// An interrupt ends the wait.
	o.LockWait = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	if _, err := Build(ctx, p, o, nil); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted wait: %v", err)
	}
	// The holder lets go while the build waits: the build runs.
	log.Reset()
	time.AfterFunc(50*time.Millisecond, func() { _ = os.Remove(lock) })
	if _, err := Build(context.Background(), p, o, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(log.String(), "Blocking waiting for file lock on the fixed build path ") {
		t.Errorf("the wait was not said: %q", log.String())
	}
}

// TestObjectDifferenceNamesSections: the objects are not kept, but the
// manifest records each ELF object's section sums, so a rebuild names the
// sections where an object differs, as it does for a kept shared object;
// an object that is not ELF says that only its sha256 was kept.
func TestObjectDifferenceNamesSections(t *testing.T) {
	orig, changed := elfWithRodataChanged(t)
	a, b := t.TempDir(), t.TempDir()
	for dir, obj := range map[string][]byte{a: orig, b: changed} {
		if err := os.MkdirAll(filepath.Join(dir, "CMakeFiles/x.dir/csrc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "CMakeFiles/x.dir/csrc/x.cu.o"), obj, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "CMakeFiles/x.dir/csrc/y.cc.o"), []byte("not elf "+dir), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sa, err := objectSums(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := objectSums(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(sa) != 2 || len(sa[0].Sections) == 0 || len(sa[1].Sections) != 0 {
		t.Fatalf("object sums: %+v", sa)
	}
	d := diffSums(sa, sb)
	if len(d) != 2 || d[0].File != "CMakeFiles/x.dir/csrc/x.cu.o" || d[0].Detail != "ELF sections that differ: .rodata" {
		t.Errorf("ELF object: %+v", d)
	}
	if len(d) == 2 && !strings.HasPrefix(d[1].Detail, "not ELF (") {
		t.Errorf("object that is not ELF: %+v", d[1])
	}
	// A manifest from before section sums: said, not guessed.
	old := append([]Output(nil), sa...)
	old[0].Sections = nil
	if d := diffSums(old, sb); !strings.Contains(d[0].Detail, "older arpatch") {
		t.Errorf("old manifest: %+v", d[0])
	}
}

// TestCheckBuildRoot: a missing root is made and removed again, an
// existing one is judged without a file made in it, and a root under a
// file or one this process may not write is refused naming the variable.
func TestCheckBuildRoot(t *testing.T) {
	dir := t.TempDir()
	if err := checkBuildRoot(filepath.Join(dir, "new", "root")); err != nil {
		t.Errorf("missing root: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the check of a missing root left %v", ents)
	}
	if err := checkBuildRoot(dir); err != nil {
		t.Errorf("existing root: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the check of an existing root left %v", ents)
	}
	// A kernel or seccomp filter without faccessat2 (ENOSYS, EPERM): a
	// writable root passes by the probe file, which is removed.
	for _, errno := range []error{unix.ENOSYS, unix.EPERM} {
		faccessat2 = func(int, string, uint32, int) error { return errno }
		err := checkBuildRoot(dir)
		faccessat2 = unix.Faccessat2
		if err != nil {
			t.Errorf("existing root, faccessat2 answering %v: %v", errno, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("the probe left %v", ents)
		}
	}
	// An immutable root (chattr +i: nobody, root included, may make a file
	// in it) is refused, where a check of its mode bits would pass it.
	testImmutableRoot(t, dir)
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{file, filepath.Join(file, "root")} {
		if err := checkBuildRoot(root); err == nil || !strings.Contains(err.Error(), "build root "+root+" is not usable: ") || !strings.Contains(err.Error(), "not a directory; set "+BuildRootEnv+" to a writable directory") {
			t.Errorf("root %s: %v", root, err)
		}
	}
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		t.Log("running as root, whom permissions do not stop: the read-only directory is not tried")
		return
	}
	for _, root := range []string{ro, filepath.Join(ro, "root")} {
		if err := checkBuildRoot(root); err == nil || !strings.Contains(err.Error(), "build root "+root+" is not usable: ") || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("read-only root %s: %v", root, err)
		}
	}
}

// testImmutableRoot checks that an immutable directory under dir is
// refused as a build root, by faccessat2 (EPERM) and, where a seccomp
// filter answers EPERM for every faccessat2, by the probe file. Setting
// the attribute needs CAP_LINUX_IMMUTABLE and a file system that has it:
// without them it is skipped, saying so.
func testImmutableRoot(t *testing.T, dir string) {
	imm := filepath.Join(dir, "immutable")
	if err := os.Mkdir(imm, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", imm).CombinedOutput(); err != nil {
		t.Logf("no immutable directory here (chattr +i: %v: %s): not tried", err, out)
		return
	}
	defer func() {
		if out, err := exec.Command("chattr", "-i", imm).CombinedOutput(); err != nil {
			t.Errorf("chattr -i %s: %v: %s", imm, err, out)
		}
	}()
	for _, seccomp := range []bool{false, true} {
		if seccomp {
			faccessat2 = func(int, string, uint32, int) error { return unix.EPERM }
		}
		err := checkBuildRoot(imm)
		faccessat2 = unix.Faccessat2
		if err == nil || !strings.Contains(err.Error(), "build root "+imm+" is not usable: ") || !strings.Contains(err.Error(), "operation not permitted") {
			t.Errorf("immutable root (faccessat2 refused by seccomp: %v): %v", seccomp, err)
		}
	}
}
