package kernels

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/lockfile"
	"golang.org/x/sys/unix"
)

// ReproScheme versions what arpatch does to make a build reproducible:
// the variables it sets, the flags the launcher adds, the fixed build
// path and the wheel normalisation. It is in the key, so changing any of
// them invalidates every cache entry, as it must.
const ReproScheme = 1

// DefaultBuildRoot is where every build runs, whatever the user's home,
// checkout or cache: nvcc writes the build path into device-side hashes
// and strings that no prefix map reaches (measured with nvcc 13.0.88:
// .nv_fatbin, .rodata.str1.8 and the anonymous namespace's .rodata differ
// between two directories even with the maps), so a bit-identical build
// needs the same absolute path on every machine.
const DefaultBuildRoot = "/tmp/arpatch-build"

// BuildRootEnv names the variable that moves DefaultBuildRoot, e.g. for a
// machine whose /tmp is not writable. The root is in the key: builds under
// two roots are not expected to give the same bytes.
const BuildRootEnv = "ARPATCH_BUILD_ROOT"

// PrefixMapEnv names the variable that carries the launcher's path maps,
// "OLD=NEW" pairs separated by ";": the launcher adds
// -ffile-prefix-map/-fdebug-prefix-map for each to the host compiler
// (through -Xcompiler for nvcc).
const PrefixMapEnv = "ARPATCH_PREFIX_MAPS"

// ObjTempEnv names the variable that, set to 1, makes the launcher pass
// --objdir-as-tempdir to nvcc: its temporary files, whose random names
// otherwise reach the object, go next to the object instead.
const ObjTempEnv = "ARPATCH_NVCC_OBJTEMP"

// Repro is the part of Inputs that fixes a build's environment: the same
// values on every machine, so the same key can give the same bytes.
type Repro struct {
	Scheme int `json:"scheme"` // ReproScheme
	// SourceDateEpoch is the committer time of Inputs.Commit in seconds
	// since 1970 (UTC), exported as SOURCE_DATE_EPOCH.
	SourceDateEpoch int64  `json:"source_date_epoch"`
	TZ              string `json:"tz"`     // "UTC"
	Locale          string `json:"locale"` // LC_ALL, "C"
	// BuildRoot is the directory under which the build path is made
	// (DefaultBuildRoot unless BuildRootEnv moves it).
	BuildRoot string `json:"build_root"`
}

// BuildID names a build's fixed directory under Repro.BuildRoot: the
// first 16 hex digits of the key of every input but the series and the
// patches. Both arms of an A/B build therefore compile in the same
// directory, one after the other, so the build path cannot make their
// objects differ.
func (in Inputs) BuildID() string {
	c := in
	c.Series, c.Patches = "", nil
	return c.Key()[:16]
}

// Names the build path's contents map to in the outputs.
const (
	mappedBuild = "/arpatch"          // the build path: sources under /arpatch/sglang, objects under /arpatch/build
	mappedTorch = "/torch-site"       // the directory holding torch (site-packages)
	mappedCUDA  = "/cuda"             // CUDA_HOME
	mappedDeps  = "/arpatch-deps"     // --deps-dir copies, one /arpatch-deps/<name> each
	reproSeed   = "arpatch-allreduce" // -frandom-seed of the extension's compiles (one module)
)

// makeReproducible turns a plan into a reproducible one: it records Repro
// in the inputs (and so in the key), sets SOURCE_DATE_EPOCH (the upstream
// commit's time), TZ, LC_ALL and PYTHONHASHSEED, and moves everything the
// compilers see (the sgl-kernel sources, copied; the build dir; the
// extension's own sources) to the fixed build path
// <root>/<Inputs.BuildID()>, with prefix maps for it and for the
// directories outside it that the compilers read (torch, CUDA, --deps-dir
// copies). For the wheel the maps reach the host compiler and nvcc
// through the compiler launcher (CMAKE_{C,CXX,CUDA}_COMPILER_LAUNCHER in
// CMAKE_ARGS, as the gencode filter does); for the extension they are
// build_ext.py's --extra-cflag and --extra-cuda-cflag. The tree is not
// patched. --deps-dir archives are unpacked under the build path too.
// It returns an error naming BuildRootEnv when the root is unusable, and
// one naming the commit when the tree's repository cannot date it.
func makeReproducible(p *Plan, env []string, launcher []string) error {
	if err := pinBuild(p, env); err != nil {
		return err
	}
	p.Stage = []string{p.Project.Dir}
	moveToBuildPath(p)
	maps, err := pathMaps(p)
	if err != nil {
		return err
	}
	nvccObjTemp := p.Toolchain != nil && p.Toolchain.NVCC.Version != "" && NVCCVersionAtLeast(p.Toolchain.NVCC.Version, 12, 8)
	setReproEnv(p, maps, nvccObjTemp)
	if p.Inputs.Kind == KindAllreduceExt {
		host := HostReproFlags(maps, reproSeed)
		for _, f := range host {
			p.Argv = append(p.Argv, "--extra-cflag="+f)
		}
		for _, f := range NVCCReproFlags(maps, reproSeed, nvccObjTemp) {
			p.Argv = append(p.Argv, "--extra-cuda-cflag="+f)
		}
		return nil
	}
	// The wheel: the host compiler runs through the same launcher as
	// nvcc, set before the user's CMAKE_ARGS so that theirs still win.
	if len(launcher) > 0 {
		l := strings.Join(launcher, ";")
		p.Env["CMAKE_ARGS"] = cmakeArg("-DCMAKE_C_COMPILER_LAUNCHER="+l) + " " +
			cmakeArg("-DCMAKE_CXX_COMPILER_LAUNCHER="+l) + " " + p.Env["CMAKE_ARGS"]
	}
	return nil
}

// pinBuild fixes what makes the build reproducible, from env: the build
// root (BuildRootEnv, else DefaultBuildRoot), SOURCE_DATE_EPOCH (the
// committer time of the plan's commit), TZ and locale; it sets p.BuildPath
// and p.Key from them. An unusable root is an error naming BuildRootEnv;
// a root checkBuildRoot refuses becomes p.Problems.
func pinBuild(p *Plan, env []string) error {
	root := getenv(env, BuildRootEnv)
	if root == "" {
		root = DefaultBuildRoot
	}
	if !filepath.IsAbs(root) || strings.ContainsAny(root, ";=, \t\n'\"\\$`") {
		return fmt.Errorf("%s=%q: the build root must be an absolute path without spaces, quotes or any of ;=,$\\ (it reaches CMAKE_ARGS and nvcc's -Xcompiler lists); e.g. %s=%s", BuildRootEnv, root, BuildRootEnv, DefaultBuildRoot)
	}
	repo, err := gitsrc.Open(p.Src)
	if err != nil {
		return err
	}
	when, err := repo.CommitTime(p.Inputs.Commit)
	if err != nil {
		return fmt.Errorf("dating the build (SOURCE_DATE_EPOCH): %w", err)
	}
	p.Inputs.Repro = &Repro{Scheme: ReproScheme, SourceDateEpoch: when.Unix(), TZ: "UTC", Locale: "C", BuildRoot: filepath.Clean(root)}
	p.BuildPath = filepath.Join(p.Inputs.Repro.BuildRoot, p.Inputs.BuildID())
	if err := checkBuildRoot(p.Inputs.Repro.BuildRoot); err != nil && p.Problems == nil {
		p.Problems = err
	}
	if user := getenv(env, "SOURCE_DATE_EPOCH"); user != "" && user != strconv.FormatInt(when.Unix(), 10) {
		p.Notes = append(p.Notes, fmt.Sprintf("SOURCE_DATE_EPOCH=%s from your environment is replaced by %d, the committer time of %s (every build of these inputs gets the same stamps)", user, when.Unix(), githash.Hash(p.Inputs.Commit).Short()))
	}
	p.Key = p.Inputs.Key()
	return nil
}

// moveToBuildPath points the plan's archive dependencies, its env, its
// argv and its working directory at the fixed build path: the sgl-kernel
// sources are staged at <BuildPath>/sglang, the build dir and --deps-dir
// archives under BuildPath.
func moveToBuildPath(p *Plan) {
	staged := filepath.Join(p.BuildPath, "sglang")
	// Archives are unpacked at build time where the marker says; under the
	// build path their paths are the same in every build.
	for i, d := range p.Deps {
		p.Deps[i].Dir = strings.ReplaceAll(d.Dir, TmpMarker, p.BuildPath)
	}
	for k, v := range p.Env {
		p.Env[k] = strings.ReplaceAll(v, TmpMarker+"/deps", p.BuildPath+"/deps")
	}
	for i, a := range p.Argv {
		switch {
		case strings.HasPrefix(a, TmpMarker+"/build"), strings.HasPrefix(a, TmpMarker+"/src"):
			p.Argv[i] = p.BuildPath + strings.TrimPrefix(a, TmpMarker)
		case strings.Contains(a, "="+TmpMarker+"/build"):
			p.Argv[i] = strings.Replace(a, "="+TmpMarker+"/build", "="+p.BuildPath+"/build", 1)
		case a == p.Src || strings.HasPrefix(a, p.Src+string(filepath.Separator)):
			p.Argv[i] = staged + strings.TrimPrefix(a, p.Src)
		}
	}
	if p.Dir == p.Src || strings.HasPrefix(p.Dir, p.Src+string(filepath.Separator)) {
		p.Dir = staged + strings.TrimPrefix(p.Dir, p.Src)
	}
	if p.Dir == staged {
		p.Dir = p.BuildPath // the extension's command runs above its inputs
	}
}

// pathMaps returns the prefix maps, "from=to", that hide the build path,
// torch's site-packages, CUDA's home and each dependency's directory from
// the compilers' output, shortest "from" first. A path with ';' or ','
// is an error: nvcc's -Xcompiler cannot carry it.
func pathMaps(p *Plan) ([]string, error) {
	maps := []string{p.BuildPath + "=" + mappedBuild}
	if tc := p.Toolchain; tc != nil {
		if site := torchSite(tc.Torch.IncludePaths); site != "" {
			maps = append(maps, site+"="+mappedTorch)
		}
		if home := tc.CUDAHome(); home != "" {
			maps = append(maps, home+"="+mappedCUDA)
		}
	}
	for _, d := range p.Deps {
		if d.Dir != "" {
			maps = append(maps, d.Dir+"="+mappedDeps+"/"+d.Name)
		}
	}
	// GCC applies the last map that matches, Clang the longest: shortest
	// first gives the most specific map with either.
	sort.SliceStable(maps, func(i, j int) bool {
		return len(strings.SplitN(maps[i], "=", 2)[0]) < len(strings.SplitN(maps[j], "=", 2)[0])
	})
	for _, m := range maps {
		if strings.ContainsAny(m, ";,") {
			return nil, fmt.Errorf("path map %q: a path with ';' or ',' cannot be passed through nvcc's -Xcompiler; move it to a path without them", m)
		}
	}
	return maps, nil
}

// setReproEnv sets the environment a reproducible build runs in:
// SOURCE_DATE_EPOCH, TZ, the locale, PYTHONHASHSEED, the prefix maps
// (PrefixMapEnv) and, for nvcc 12.8 and later, ObjTempEnv.
func setReproEnv(p *Plan, maps []string, nvccObjTemp bool) {
	p.Env["SOURCE_DATE_EPOCH"] = strconv.FormatInt(p.Inputs.Repro.SourceDateEpoch, 10)
	p.Env["TZ"] = p.Inputs.Repro.TZ
	p.Env["LC_ALL"] = p.Inputs.Repro.Locale
	p.Env["LANG"] = p.Inputs.Repro.Locale
	p.Env["PYTHONHASHSEED"] = "0"
	p.Env[PrefixMapEnv] = strings.Join(maps, ";")
	if nvccObjTemp {
		p.Env[ObjTempEnv] = "1"
	}
}

// torchSite returns the directory that holds the torch package, from
// torch's include paths (".../site-packages/torch/include"), or "".
func torchSite(includes []string) string {
	for _, p := range includes {
		if filepath.Base(p) == "include" && filepath.Base(filepath.Dir(p)) == "torch" {
			return filepath.Dir(filepath.Dir(p))
		}
	}
	return ""
}

// HostReproFlags are the flags that keep paths and randomness out of a
// host compiler's (GCC or Clang) output: -ffile-prefix-map and
// -fdebug-prefix-map for each "OLD=NEW" map, and -frandom-seed=seed.
func HostReproFlags(maps []string, seed string) []string {
	var out []string
	for _, m := range maps {
		out = append(out, "-ffile-prefix-map="+m, "-fdebug-prefix-map="+m)
	}
	return append(out, "-frandom-seed="+seed)
}

// NVCCReproFlags are HostReproFlags passed through nvcc (-Xcompiler FLAG
// each), plus --objdir-as-tempdir when objTemp (nvcc 12.8 or newer here).
func NVCCReproFlags(maps []string, seed string, objTemp bool) []string {
	var out []string
	for _, f := range HostReproFlags(maps, seed) {
		out = append(out, "-Xcompiler", f)
	}
	if objTemp {
		out = append(out, "--objdir-as-tempdir")
	}
	return out
}

// NVCCVersionAtLeast reports whether an nvcc version such as "13.0.88"
// is major.minor or newer.
func NVCCVersionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// stageBuild prepares a plan's fixed build path from scratch: it takes
// the path's lock (takeBuildPath: while another build holds it, it waits
// up to opts.LockWait, saying so on opts.Log), empties it, and copies
// each of plan.Stage from the tree into <path>/sglang, with modes 0644 or
// 0755 and mtimes at SOURCE_DATE_EPOCH, so that neither the user's umask
// nor checkout time reach the outputs. The returned function removes the
// path and releases the lock.
func stageBuild(ctx context.Context, plan *Plan, opts BuildOptions) (func(), error) {
	if plan.BuildPath == "" {
		return func() {}, nil
	}
	root := filepath.Dir(plan.BuildPath)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, buildRootError(root, err)
	}
	release, err := takeBuildPath(ctx, plan.BuildPath, opts)
	if err != nil {
		return nil, err
	}
	done := func() {
		// Best effort: the next build at this path removes it first, and
		// reports the error there.
		_ = os.RemoveAll(plan.BuildPath)
		release()
	}
	if err := os.RemoveAll(plan.BuildPath); err != nil {
		done()
		return nil, err
	}
	mtime := time.Unix(plan.Inputs.Repro.SourceDateEpoch, 0)
	for _, rel := range plan.Stage {
		from := filepath.Join(plan.Src, filepath.FromSlash(rel))
		to := filepath.Join(plan.BuildPath, "sglang", filepath.FromSlash(rel))
		if err := copyTree(from, to, mtime); err != nil {
			done()
			return nil, fmt.Errorf("copying %s to the build path: %w", from, err)
		}
	}
	return done, nil
}

// lockPoll is how often a build waiting for the fixed build path tries
// its lock again.
var lockPoll = 200 * time.Millisecond

// takeBuildPath takes the lock of the fixed build path path. While
// another live build holds it, it says once on opts.Log that it waits
// ("Blocking waiting for file lock on the fixed build path ...", as
// cargo says it of its build directory) and tries again every lockPoll,
// up to opts.LockWait; then the error names the holder, the time waited
// and the flag that sets it. ctx's end stops the wait: ErrInterrupted.
func takeBuildPath(ctx context.Context, path string, opts BuildOptions) (func(), error) {
	start := time.Now()
	said := false
	for {
		release, err := lockfile.Acquire(path + ".lock")
		var held *lockfile.HeldError
		switch {
		case err == nil:
			return release, nil
		case !errors.As(err, &held):
			return nil, buildRootError(filepath.Dir(path), err)
		}
		waited := time.Since(start)
		if waited >= opts.LockWait {
			what := "; wait for it to finish, or pass --lock-timeout to wait for it"
			if opts.LockWait > 0 {
				what = fmt.Sprintf(" after %s of waiting (--lock-timeout); run this build when it is done, or pass a longer --lock-timeout", opts.LockWait)
			}
			return nil, fmt.Errorf("another build (pid %s) is using the fixed build path %s%s (if no arpatch runs as that pid, remove %s)", held.PID, path, what, held.Path)
		}
		if !said && opts.Log != nil {
			fmt.Fprintf(opts.Log, "Blocking waiting for file lock on the fixed build path %s: another build (pid %s) is using it; waiting up to %s (--lock-timeout)\n", path, held.PID, opts.LockWait)
			said = true
		}
		t := time.NewTimer(min(lockPoll, opts.LockWait-waited))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ErrInterrupted
		case <-t.C:
		}
	}
}

// copyTree copies the regular files, directories and symlinks under from
// to to, skipping .git, with normalised modes and mtimes.
func copyTree(from, to string, mtime time.Time) error {
	var dirs []string
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.IsDir():
			dirs = append(dirs, dst)
			return os.MkdirAll(dst, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := fs.FileMode(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			if err := copyFileMode(p, dst, mode); err != nil {
				return err
			}
			return os.Chtimes(dst, mtime, mtime)
		}
		return nil // sockets, devices: not sources
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(dirs[i], mtime, mtime); err != nil {
			return err
		}
	}
	return nil
}

func copyFileMode(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }() // read-only: Close has nothing to report
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy's error is the one to report
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode) // the umask narrowed OpenFile's mode
}

// objectSums lists the object files (*.o, *.obj) under dir with their
// sha256 and, for ELF objects, each section's size and sha256, by path
// relative to dir: what the manifest records of a build's intermediate
// files (the objects are not kept), so that --verify-reproducible and ab
// build can name the translation units whose objects differ and the
// sections where.
func objectSums(dir string) ([]Output, error) {
	var out []Output
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() || (!strings.HasSuffix(p, ".o") && !strings.HasSuffix(p, ".obj")) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		o := Output{File: filepath.ToSlash(rel), SHA256: digest.SHA256Hex(data), Bytes: int64(len(data))}
		o.Sections, _ = ElfSectionSums(data) // nil for an object that is not ELF
		out = append(out, o)
		return nil
	})
	return out, err
}

// checkBuildRoot refuses a build root a build could not use, as the build
// itself would (stageBuild creates it and makes its files in it), without
// leaving anything behind. A missing root is created with its missing
// parents, checked, and removed again. The root must be a directory in
// which this process may make and remove files (rootWritable): the
// kernel's faccessat2(2) answers that without making a file, refusing
// permissions (EACCES) and a read-only mount (EROFS); an immutable
// directory, and a kernel or seccomp filter without faccessat2, get a
// temporary file made and removed in the root instead. What only a file
// made in a root that passed faccessat2 would show (a file system out of
// inodes, one that refuses creation even to root) the build's first step
// reports, naming BuildRootEnv too. It returns an error naming
// BuildRootEnv.
func checkBuildRoot(root string) error {
	var made []string
	for d := root; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		made = append(made, d)
	}
	defer func() {
		for _, d := range made { // deepest first
			_ = os.Remove(d) // fails only when not empty: then it is not ours
		}
	}()
	err := os.MkdirAll(root, 0o755)
	if err == nil {
		err = rootWritable(root)
	}
	if err != nil {
		return buildRootError(root, err)
	}
	return nil
}

// faccessat2 is unix.Faccessat2 (the faccessat2(2) system call itself,
// with none of unix.Faccessat's fallback to a check of the mode bits);
// tests replace it to answer as a seccomp filter or an old kernel does.
var faccessat2 = unix.Faccessat2

// rootWritable returns nil when this process may make and remove files in
// the directory root. faccessat2(2) with W_OK|X_OK and the effective ids
// (AT_EACCESS) decides when it answers yes, EACCES or EROFS (an
// *fs.PathError with op "access"). It answers EPERM for an immutable
// directory (chattr +i), which a check of the mode bits would pass even
// for root, and a seccomp filter may answer EPERM or ENOSYS for it, as a
// kernel before 5.8 answers ENOSYS: for those a temporary file is made in
// root and removed, whose errors (os.CreateTemp's, the close's and the
// removal's) are returned. Upstream: Linux fs/open.c@v5.8 (do_faccessat,
// faccessat2) and fs/namei.c (inode_permission: -EPERM for IS_IMMUTABLE).
func rootWritable(root string) error {
	err := faccessat2(unix.AT_FDCWD, root, unix.W_OK|unix.X_OK, unix.AT_EACCESS)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOSYS) {
		return &fs.PathError{Op: "access", Path: root, Err: err}
	}
	f, err := os.CreateTemp(root, ".arpatch-root-check-*")
	if err != nil {
		return err
	}
	err = f.Close()
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr // a root a build cannot remove from is not usable
	}
	return err
}

// buildRootError is the refusal of build root root for err, with the
// remedy: set BuildRootEnv to a directory that works.
func buildRootError(root string, err error) error {
	return fmt.Errorf("build root %s is not usable: %w; set %s to a writable directory (the same on every machine that should give the same bytes), e.g. %s=%s", root, err, BuildRootEnv, BuildRootEnv, DefaultBuildRoot)
}
