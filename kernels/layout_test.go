package kernels

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/sglkernel"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/testrepo"
)

// TestPlanFindsTheProject plans the wheel in both layouts: the command runs
// in the project's directory, the deps come from its CMake files, and the
// key records where it is.
func TestPlanFindsTheProject(t *testing.T) {
	plans := map[string]*Plan{}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			e := newEnvIn(t, l)
			p := mustPlan(t, e.opts())
			plans[l.name] = p
			// The command runs in the project's copy in the fixed build path.
			if p.Project.Dir != l.dir || p.Project.Name != "sglang-kernel" || p.Dir != filepath.Join(p.BuildPath, "sglang", l.dir) || p.Inputs.Project != l.dir {
				t.Errorf("project %+v, dir %s, key input %q", p.Project, p.Dir, p.Inputs.Project)
			}
			files := map[string]bool{}
			for _, d := range p.Deps {
				files[d.File] = true
			}
			if len(files) != 2 || !files[l.dir+"/CMakeLists.txt"] || !files[l.dir+"/cmake/deps.cmake"] {
				t.Errorf("deps from %v", files)
			}
		})
	}
	// A tree with both (a fork that copied instead of moving): refused,
	// naming both, before anything is probed or built.
	up := filepath.Join(t.TempDir(), "up")
	if _, err := makeUpstream(t, up, aotLayout, false); err != nil {
		t.Fatal(err)
	}
	c2, err := testrepo.Change(up, "copy", kernelFiles(t, oldLayout))
	if err != nil {
		t.Fatal(err)
	}
	two := newEnvFrom(t, aotLayout, up, c2)
	_, err = PlanBuild(context.Background(), two.opts())
	contains(t, errString(err), two.src+" holds 2 sgl-kernel projects (python/sglang/kernels/aot/, sgl-kernel/); arpatch builds one and will not guess which")
	if _, err := PlanExt(context.Background(), two.opts()); !sglkernel.IsNotFound(err) {
		t.Errorf("ext with two projects: %v", err)
	}

	// The aot layout's plan (its subtest's, or made here when -run left
	// that subtest out): URL-pinned deps.
	p := plans[aotLayout.name]
	if p == nil {
		p = mustPlan(t, newEnvIn(t, aotLayout).opts())
	}
	cut := p.Deps[0]
	if cut.Name != "repo-cutlass" || cut.URL != "https://github.com/NVIDIA/cutlass/archive/57e3cfb47a2d9e0d46eb6335c3dc411498efa198.tar.gz" ||
		cut.Repo != "https://${GITHUB_ARTIFACTORY}/NVIDIA/cutlass/archive/57e3cfb47a2d9e0d46eb6335c3dc411498efa198.tar.gz" ||
		cut.Pin() != "57e3cfb47a2d9e0d46eb6335c3dc411498efa198" || cut.URLHash != "SHA256="+digest.SHA256Hex(fixtureArchive(t, "repo-cutlass")) {
		t.Errorf("cutlass %+v", cut)
	}
	if got := cudaarch.Strings(p.Upstream); strings.Join(got, " ") != "90 120a 90a" {
		t.Errorf("upstream archs %v", got)
	}
}

// TestDepsDirArchives gives the aot layout's URL-pinned deps as archives:
// by name or by the URL's file name, checked against URL_HASH, unpacked
// (top directory stripped) where the build looks; a wrong archive, a
// missing dep and an archive changed after the plan are refused with the
// command that fixes each.
func TestDepsDirArchives(t *testing.T) {
	e := newEnvIn(t, aotLayout)
	dd := t.TempDir()
	o := e.opts()
	o.Offline, o.DepsDir = true, dd

	// Nothing there: every dep is named with the command that fetches it.
	_, err := PlanBuild(context.Background(), o)
	var me *MissingDepsError
	if !errors.As(err, &me) || len(me.Missing) != 2 {
		t.Fatalf("empty deps dir: %v", err)
	}
	contains(t, err.Error(), "2 dependencies would be downloaded at configure time (not found in --deps-dir "+dd+")",
		"repo-flashmla-cutlass", "(python/sglang/kernels/aot/cmake/deps.cmake)",
		"mkdir -p "+dd,
		"curl -fL -o "+filepath.Join(dd, "repo-cutlass.tar.gz")+" https://github.com/NVIDIA/cutlass/archive/57e3cfb47a2d9e0d46eb6335c3dc411498efa198.tar.gz",
		"curl -fL -o "+filepath.Join(dd, "repo-flashmla-cutlass.tar.gz")+" https://github.com/NVIDIA/cutlass/archive/147f5673d0c1c3dcf66f78d677fd647e4a020219.tar.gz",
		"then run the build again with --deps-dir "+dd)

	// A deps dir whose path needs quotes: each printed command runs in sh.
	spaced := filepath.Join(t.TempDir(), "my deps")
	if err := os.Mkdir(spaced, 0o755); err != nil {
		t.Fatal(err)
	}
	os2 := o
	os2.DepsDir = spaced
	_, err = PlanBuild(context.Background(), os2)
	contains(t, errString(err), "mkdir -p '"+spaced+"'", "curl -fL -o '"+filepath.Join(spaced, "repo-cutlass.tar.gz")+"' https://", "--deps-dir '"+spaced+"'")

	// One by its name, one by the URL's file name (as curl -O saves it);
	// one missing is still named.
	cut := fixtureArchive(t, "repo-cutlass")
	if err := os.WriteFile(filepath.Join(dd, "repo-cutlass.tar.gz"), cut, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = PlanBuild(context.Background(), o)
	if !errors.As(err, &me) || len(me.Missing) != 1 || me.Missing[0].Name != "repo-flashmla-cutlass" {
		t.Fatalf("one missing: %v", err)
	}
	fm := fixtureArchive(t, "repo-flashmla-cutlass")
	if err := os.WriteFile(filepath.Join(dd, "147f5673d0c1c3dcf66f78d677fd647e4a020219.tar.gz"), fm, 0o644); err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, o)
	if p.Deps[0].Archive != filepath.Join(dd, "repo-cutlass.tar.gz") || p.Deps[0].Commit != "archive-sha256:"+digest.SHA256Hex(cut) ||
		p.Deps[1].Archive != filepath.Join(dd, "147f5673d0c1c3dcf66f78d677fd647e4a020219.tar.gz") || p.Deps[1].Commit != "archive-sha256:"+digest.SHA256Hex(fm) {
		t.Fatalf("deps %+v", p.Deps)
	}
	// Unpacked under the fixed build path, so their paths are the same in
	// every build.
	contains(t, p.Env["CMAKE_ARGS"], "'-DFETCHCONTENT_SOURCE_DIR_REPO-CUTLASS="+p.BuildPath+"/deps/repo-cutlass'", "-DFETCHCONTENT_FULLY_DISCONNECTED=ON")
	if p.Inputs.Deps[0].Commit != "archive-sha256:"+digest.SHA256Hex(cut) {
		t.Errorf("key input %+v", p.Inputs.Deps[0])
	}

	// The build sees each archive unpacked, its top directory stripped.
	seen := filepath.Join(t.TempDir(), "seen")
	eb := *e
	eb.env = append(append([]string(nil), e.env...), `FAKE_BUILD_DURING=printf '%s\n' "$CMAKE_ARGS" | grep -o "FETCHCONTENT_SOURCE_DIR_[^=]*=[^']*" | while IFS== read -r k v; do cat "$v/include/cute/a.h" "$v/include/b.h"; done > `+seen)
	eb.cache = Cache{Dir: filepath.Join(t.TempDir(), "cache with space")}
	ob := eb.opts()
	ob.Offline, ob.DepsDir = true, dd
	pb := mustPlan(t, ob)
	if pb.Key != p.Key {
		t.Error("FAKE_BUILD_DURING changed the key")
	}
	if _, err := Build(context.Background(), pb, ob, nil); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, seen); got != "// repo-cutlass header\n// repo-cutlass header\n// repo-flashmla-cutlass header\n// repo-flashmla-cutlass header\n" {
		t.Errorf("the build saw %q", got)
	}
	if ents, _ := filepath.Glob(filepath.Join(eb.cache.Dir, pb.Key, "deps")); len(ents) != 0 {
		t.Errorf("unpacked deps kept in the entry: %v", ents)
	}

	// An archive that is not upstream's: both hashes and the fix.
	bad := append(append([]byte(nil), cut...), 0)
	if err := os.WriteFile(filepath.Join(dd, "repo-cutlass.tar.gz"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = PlanBuild(context.Background(), o)
	contains(t, errString(err), "dependency repo-cutlass: "+filepath.Join(dd, "repo-cutlass.tar.gz")+" has sha256 "+digest.SHA256Hex(bad),
		"but python/sglang/kernels/aot/CMakeLists.txt pins URL_HASH SHA256="+digest.SHA256Hex(cut),
		"Fetch it again: rm "+filepath.Join(dd, "repo-cutlass.tar.gz")+" && curl -fL -o "+filepath.Join(dd, "repo-cutlass.tar.gz")+" https://github.com/NVIDIA/cutlass/archive/57e3cfb47a2d9e0d46eb6335c3dc411498efa198.tar.gz")

	// Changed between the plan and the build: refused, nothing cached.
	if err := os.WriteFile(filepath.Join(dd, "repo-cutlass.tar.gz"), cut, 0o644); err != nil {
		t.Fatal(err)
	}
	o2 := e.with("X_FRESH_CACHE=1").opts()
	o2.Offline, o2.DepsDir = true, dd
	p2 := mustPlan(t, o2)
	if err := os.WriteFile(filepath.Join(dd, "repo-cutlass.tar.gz"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Build(context.Background(), p2, o2, nil)
	contains(t, errString(err), "dependency repo-cutlass: "+filepath.Join(dd, "repo-cutlass.tar.gz")+" changed since the plan")
	if m, _ := o2.Cache.Lookup(p2.Key); m != nil {
		t.Error("a build with a changed archive was cached")
	}
}

// tgz builds a gzip'd tar of the given headers (with bodies for files).
func tgz(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		body := h.Name + "\n"
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUnpackTarGz(t *testing.T) {
	dir := t.TempDir()
	unpack := func(b []byte, want string) (string, error) {
		src := filepath.Join(dir, "a.tar.gz")
		if err := os.WriteFile(src, b, 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, "out")
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
		return dst, unpackTarGz(src, dst, want)
	}
	reg := func(name string, mode int64) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}
	}
	// Two top-level entries: unpacked as they are; modes kept as 644/755.
	dst, err := unpack(tgz(t, reg("a/x.h", 0o600), reg("run.sh", 0o700)), "")
	if err != nil || readFile(t, filepath.Join(dst, "a/x.h")) != "a/x.h\n" {
		t.Fatalf("two tops: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "run.sh")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh mode %v", fi)
	}
	// A hard link inside is unpacked as a link to its target.
	if dst, err = unpack(tgz(t, reg("top/x.h", 0o644), &tar.Header{Typeflag: tar.TypeLink, Name: "top/y.h", Linkname: "top/x.h"}), ""); err != nil || readFile(t, filepath.Join(dst, "y.h")) != "top/x.h\n" {
		t.Errorf("hard link: %v", err)
	}
	for name, c := range map[string]struct {
		hdrs []*tar.Header
		want string
	}{
		"dotdot":       {[]*tar.Header{reg("top/../../evil", 0o644)}, "entry top/../../evil leaves the directory"},
		"absolute":     {[]*tar.Header{reg("/etc/evil", 0o644)}, "entry /etc/evil leaves the directory"},
		"symlink out":  {[]*tar.Header{{Typeflag: tar.TypeSymlink, Name: "top/l", Linkname: "../../etc"}}, "link top/l -> ../../etc leaves the directory"},
		"symlink abs":  {[]*tar.Header{{Typeflag: tar.TypeSymlink, Name: "top/l", Linkname: "/etc/passwd"}}, "link top/l -> /etc/passwd leaves"},
		"hardlink out": {[]*tar.Header{{Typeflag: tar.TypeLink, Name: "top/l", Linkname: "../x"}}, "link top/l -> ../x leaves"},
		"device":       {[]*tar.Header{{Typeflag: tar.TypeChar, Name: "top/tty"}}, "entry top/tty is neither a file, a directory nor a link"},
	} {
		dst, err := unpack(tgz(t, c.hdrs...), "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
		if _, serr := os.Stat(dst); serr == nil {
			t.Errorf("%s: %s left behind", name, dst)
		}
		if _, serr := os.Stat(dst + ".unpack"); serr == nil {
			t.Errorf("%s: staging dir left behind", name)
		}
	}
	// Bytes after the archive are hashed too; a wrong hash unpacks nothing.
	good := fixtureArchive(t, "repo-x")
	padded := append(append([]byte(nil), good...), make([]byte, 9000)...)
	if _, err := unpack(padded, digest.SHA256Hex(good)); err == nil || !strings.Contains(err.Error(), "changed since the plan: sha256 "+digest.SHA256Hex(padded)) {
		t.Errorf("trailing bytes: %v", err)
	}
	if _, err := unpack([]byte("not gzip"), ""); err == nil || !strings.Contains(err.Error(), "not a gzip'd tar archive") {
		t.Errorf("not gzip: %v", err)
	}
}

// TestRemediesRunAsPrinted runs, with git, the commands two refusals
// print: --offline's clone at the pin for a GIT_TAG dep (git's insteadOf
// points the upstream URL at a local fixture repository), and --check's
// restore of a deleted translation unit.
func TestRemediesRunAsPrinted(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed: the printed remedies are git commands")
	}
	dep := filepath.Join(t.TempDir(), "fmt")
	if err := testrepo.WriteFiles(dep, map[string]string{"include/fmt/core.h": "// fixture fmt\n"}); err != nil {
		t.Fatal(err)
	}
	pin, err := testrepo.Init(dep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testrepo.Change(dep, "after the pin", map[string]string{"include/fmt/core.h": "// later\n"}); err != nil {
		t.Fatal(err)
	}
	cm := "FetchContent_Declare(repo-fmt GIT_REPOSITORY https://github.com/fmtlib/fmt GIT_TAG " + pin + ")\n"
	e := newEnvWritable(t, layout{"git-pin", "sgl-kernel", cm, ""}) // its TU is deleted and restored
	work := t.TempDir()
	o := e.opts()
	o.Offline = true
	_, err = PlanBuild(context.Background(), o)
	var me *MissingDepsError
	if !errors.As(err, &me) {
		t.Fatalf("offline: %v", err)
	}
	want := "git clone https://github.com/fmtlib/fmt deps/repo-fmt && git -C deps/repo-fmt checkout " + pin
	var cmds []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "mkdir -p ") || strings.HasPrefix(l, "git clone ") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) != 2 || cmds[0] != "mkdir -p deps" || cmds[1] != want {
		t.Fatalf("printed %q, want mkdir and %q", cmds, want)
	}
	// git's clone copies no template (hooks/*.sample and the rest: files
	// the remedy does not need) from an empty template directory.
	noTemplate := t.TempDir()
	for _, c := range cmds {
		sh := exec.Command("sh", "-c", c)
		sh.Dir = work
		sh.Env = append(os.Environ(), "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=url."+dep+".insteadOf", "GIT_CONFIG_VALUE_0=https://github.com/fmtlib/fmt",
			"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_TEMPLATE_DIR="+noTemplate)
		if out, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
	}
	o.DepsDir = filepath.Join(work, "deps")
	p := mustPlan(t, o)
	if p.Deps[0].Commit != pin || p.Deps[0].Dir != filepath.Join(work, "deps", "repo-fmt") {
		t.Errorf("after the remedy: %+v", p.Deps[0])
	}

	// --check with its translation unit deleted: restored by the command
	// it prints.
	if err := os.Remove(e.k("csrc/allreduce/custom_all_reduce.cu")); err != nil {
		t.Fatal(err)
	}
	_, _, err = Check(context.Background(), CheckOptions{Src: e.src, Archs: []cudaarch.Arch{"90a"}, Python: "python3", Env: e.env})
	msg := errString(err)
	i := strings.Index(msg, "(`git -C ")
	if i < 0 || !strings.HasSuffix(msg, "`)") {
		t.Fatalf("deleted TU: %v", err)
	}
	if c := msg[i+2 : len(msg)-2]; c != shellq.Join([]string{"git", "-C", e.src, "checkout", "--", "sgl-kernel/csrc/allreduce/custom_all_reduce.cu"}) {
		t.Fatalf("printed %q", c)
	} else if out, err := exec.Command("sh", "-c", c).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", c, err, out)
	}
	if res, _, err := Check(context.Background(), CheckOptions{Src: e.src, Archs: []cudaarch.Arch{"90a"}, Python: "python3", Env: e.env}); err != nil || !res[0].OK {
		t.Errorf("after the remedy: %+v %v", res, err)
	}
}
