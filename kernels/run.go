package kernels

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/internal/goroutine"
	"github.com/arpatch/arpatch/internal/lockfile"
	"github.com/arpatch/arpatch/internal/procgroup"
	"github.com/arpatch/arpatch/internal/shellq"
)

// Result is a finished build, from the cache or just made.
type Result struct {
	Plan     *Plan
	Manifest *Manifest
	Hit      bool          // true when the entry was already in the cache
	Wheel    string        // path of the wheel in the cache entry
	Copied   string        // path of the copy in BuildOptions.Out, if any
	Elapsed  time.Duration // wall time of Build
}

// ErrInterrupted is returned when the context is cancelled during a build.
var ErrInterrupted = errors.New("the build's processes were stopped; no cache entry or temp files were left")

// BuildError is a build command that failed; Tail holds the last lines of
// its log.
type BuildError struct {
	Err  error
	Log  string
	Tail []string
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("the build failed (%v); last %d lines of %s:\n%s", e.Err, len(e.Tail), e.Log, strings.Join(e.Tail, "\n"))
}

// killGrace is how long the build's process group leader gets between
// SIGTERM and SIGKILL on interrupt.
var killGrace = 5 * time.Second

// Build runs plan (from PlanBuild) unless its key is already cached. A hit
// copies the wheel to opts.Out and returns at once. A miss refuses a
// toolchain with problems, then runs the command in its own process group
// with the full log in the temp entry's build.log and ninja's "[n/m]"
// progress sent to progress; on success the entry is committed atomically.
// On failure it returns a *BuildError with the last 40 log lines and keeps
// the log under <cache>/logs/; on cancellation it kills the whole process
// group and leaves no entry and no temp files (ErrInterrupted).
func Build(ctx context.Context, plan *Plan, opts BuildOptions, progress Progress) (*Result, error) {
	start := time.Now()
	res := &Result{Plan: plan}
	m, err := opts.Cache.Lookup(plan.Key)
	if err != nil {
		return nil, err
	}
	if m != nil {
		res.Manifest, res.Hit = m, true
		return res, finish(res, opts, start)
	}
	if plan.Problems != nil {
		return nil, plan.Problems
	}
	// The tree must hold still while it builds: apply and revert are
	// refused meanwhile, and the tree is checked again before the entry
	// is committed, so no wheel lands under a key its tree no longer has.
	unlockTree, err := checkout.Lock(plan.Src)
	if err != nil {
		return nil, err
	}
	defer unlockTree()
	tmp, release, err := opts.Cache.Begin(plan.Key)
	if err != nil {
		return nil, err
	}
	defer release()
	committed := false
	defer func() {
		if !committed {
			// A temp that fails to go is swept by the next Begin or Prune.
			_ = os.RemoveAll(tmp)
		}
	}()
	m, err = produce(ctx, plan, opts, tmp, progress)
	if err != nil {
		return nil, err
	}
	if err := sameTree(plan); err != nil {
		kept := keepLog(opts.Cache, plan.Key, filepath.Join(tmp, m.Log))
		return nil, fmt.Errorf("%w; the build finished but was not cached (its log: %s)", err, kept)
	}
	// The group is done; a record left in the entry names nothing that
	// runs (only temp dirs are checked for live groups).
	_ = os.Remove(filepath.Join(tmp, PGIDFile))
	if err := opts.Cache.Commit(tmp, m); err != nil {
		return nil, fmt.Errorf("saving the build in the cache: %w", err)
	}
	committed = true
	res.Manifest = m
	return res, finish(res, opts, start)
}

// produce runs plan's command with tmp as its temp dir: it prepares the
// fixed build path (stageBuild) and the extension's sources, runs the
// command with the plan's environment (log in tmp/build.log), moves the
// one output matching plan.Output to tmp, normalises a wheel
// (NormalizeWheel), records the output's and the objects' sha256 and
// removes everything else. It returns the manifest, not yet committed;
// a failed command is a *BuildError with its log kept under the cache's
// logs/, and a cancelled one ErrInterrupted.
func produce(ctx context.Context, plan *Plan, opts BuildOptions, tmp string, progress Progress) (*Manifest, error) {
	unstage, err := stageBuild(ctx, plan, opts)
	if err != nil {
		return nil, err
	}
	defer unstage()
	if err := prepareSources(plan, tmp); err != nil {
		return nil, err
	}
	logPath := filepath.Join(tmp, "build.log")
	m := &Manifest{
		Schema: ManifestSchema, Key: plan.Key, Inputs: plan.Inputs, Dir: plan.Dir,
		Command: plan.Command("<tmp>"), Env: plan.Env, Jobs: plan.Jobs, Src: plan.Src,
		StartedAt: time.Now().UTC(), ProbeSeconds: plan.ProbeSeconds, Log: "build.log", ArpatchVersion: opts.Version,
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	gencodeLog := filepath.Join(tmp, "gencode.log")
	defer func() { _ = os.Remove(gencodeLog) }() // one left in the entry is not an output: the manifest lists those
	runEnv := append(append(append([]string(nil), env...), plan.EnvIn(tmp)...), GencodeLogEnv+"="+gencodeLog)
	runErr := runLogged(ctx, plan.Dir, plan.Command(tmp), runEnv, logPath, progress)
	m.FinishedAt = time.Now().UTC()
	m.BuildSeconds = m.FinishedAt.Sub(m.StartedAt).Seconds()
	failed := func(err error) (*Manifest, error) {
		kept := keepLog(opts.Cache, plan.Key, logPath)
		return nil, &BuildError{Err: err, Log: kept, Tail: tailLines(kept, 40)}
	}
	if runErr != nil {
		if errors.Is(runErr, ErrInterrupted) {
			return nil, runErr
		}
		return failed(runErr)
	}
	outs, _ := filepath.Glob(filepath.Join(tmp, plan.Output))
	if plan.BuildPath != "" && strings.HasPrefix(plan.Output, "build/") {
		outs, _ = filepath.Glob(filepath.Join(plan.BuildPath, plan.Output))
	}
	if len(outs) != 1 {
		return failed(fmt.Errorf("expected one file matching %s, found %d", plan.Output, len(outs)))
	}
	name := filepath.Base(outs[0])
	out := filepath.Join(tmp, name)
	if err := moveFile(outs[0], out); err != nil {
		return nil, err
	}
	if strings.HasSuffix(name, ".whl") && plan.Inputs.Repro != nil {
		if err := NormalizeWheel(out, plan.Inputs.Repro.SourceDateEpoch); err != nil {
			return failed(fmt.Errorf("normalising the wheel: %w", err))
		}
	}
	if plan.BuildPath != "" {
		if m.Objects, err = objectSums(filepath.Join(plan.BuildPath, "build")); err != nil {
			return nil, err
		}
	}
	if err := removeScratch(tmp); err != nil {
		return nil, err
	}
	sum, n, err := fileSHA256(out)
	if err != nil {
		return nil, err
	}
	m.Outputs = []Output{{File: name, SHA256: sum, Bytes: n}}
	if err := compiledArchs(plan, gencodeLog); err != nil {
		kept := keepLog(opts.Cache, plan.Key, logPath)
		return nil, fmt.Errorf("%w; the build finished but was not cached (its log: %s)", err, kept)
	}
	return m, nil
}

// prepareSources writes the allreduce extension's sources (into the
// build path, else tmp) and unpacks the plan's archive dependencies under
// tmp.
func prepareSources(plan *Plan, tmp string) error {
	if plan.Inputs.Kind == KindAllreduceExt {
		dir := tmp
		if plan.BuildPath != "" {
			dir = plan.BuildPath
		}
		if err := writeExtSources(dir); err != nil {
			return err
		}
	}
	return unpackDeps(plan, tmp)
}

// removeScratch removes the build's out, build, src and deps from tmp:
// gigabytes, which would otherwise be committed into the cache entry; the
// output moved to tmp is what is kept.
func removeScratch(tmp string) error {
	for _, d := range []string{"out", "build", "src", "deps"} {
		if err := os.RemoveAll(filepath.Join(tmp, d)); err != nil {
			return err
		}
	}
	return nil
}

// moveFile renames src to dst, copying when they are on two file systems
// (the fixed build path and the cache).
func moveFile(src, dst string) error {
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := copyFileMode(src, dst, info.Mode().Perm()); err != nil {
		return err
	}
	return os.Remove(src)
}

// compiledArchs checks, after a wheel build, that every requested arch was
// compiled by some nvcc command: an arch upstream names only under a
// condition not met here (sm_86 with FA3 off, aarch64-only archs) leaves
// every command unfiltered and the wheel without it. Without a log (nvcc
// never ran through arpatch's filter, e.g. a test launcher) there is
// nothing to judge.
func compiledArchs(plan *Plan, log string) error {
	if plan.Inputs.Kind != KindWheel {
		return nil
	}
	b, err := os.ReadFile(log)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	for _, l := range strings.Fields(string(b)) {
		seen[l] = true
	}
	var missing []string
	for _, a := range plan.Archs {
		if !seen[string(a)] {
			missing = append(missing, a.SM())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no translation unit was compiled for %s: upstream's CMake names it only under a condition this build does not meet (an option that is off, another host arch), so the wheel has no code for it; build for an arch upstream compiles here", strings.Join(missing, ", "))
	}
	return nil
}

// sameTree checks, after a build, that the tree still is what the plan
// keyed: same apply state, no edits since.
func sameTree(plan *Plan) error {
	if plan.State == nil {
		return nil
	}
	rep, err := appliedState(plan.Src)
	if err != nil {
		return fmt.Errorf("the tree changed during the build: %w", err)
	}
	st := rep.State
	if st.Commit != plan.Inputs.Commit || !slices.Equal(patchInputs(st), plan.Inputs.Patches) {
		return fmt.Errorf("the tree changed during the build: %s now has series %s at %s", plan.Src, cmp.Or(st.Series, "(none)"), st.Commit)
	}
	return nil
}

func finish(res *Result, opts BuildOptions, start time.Time) error {
	dir := opts.Cache.EntryDir(res.Manifest.Key)
	for _, o := range res.Manifest.Outputs {
		if strings.HasSuffix(o.File, ".whl") || strings.HasSuffix(o.File, ".so") {
			res.Wheel = filepath.Join(dir, o.File)
		}
	}
	if opts.Out != "" && res.Wheel != "" {
		p, err := copyOut(res.Wheel, opts.Out)
		if err != nil {
			return fmt.Errorf("copying %s to --out %s: %w", res.Wheel, opts.Out, err)
		}
		res.Copied = p
	}
	res.Elapsed = time.Since(start)
	return nil
}

// PGIDFile, in a build's temp dir, holds the process group of its
// command.
const PGIDFile = ".pgid"

// runLogged runs argv in dir in a process group of its own
// (internal/procgroup), writing stdout and stderr to logPath and feeding
// each line to progress. On ctx cancellation the group gets SIGTERM, then
// SIGKILL after killGrace; runLogged waits for the group's leader and
// returns ErrInterrupted. A log or PGIDFile record that cannot be written
// fails the run (the group is stopped first), naming the file.
func runLogged(ctx context.Context, dir string, argv, env []string, logPath string, progress Progress) (err error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	// The log is kept (in the cache entry, or under logs/ for a failure):
	// one that did not reach the disk fails the build.
	defer func() {
		if cerr := logf.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("build log %s: %w", logPath, cerr)
		}
	}()
	if _, err := fmt.Fprintf(logf, "# dir: %s\n# command: %s\n", dir, shellq.Join(argv)); err != nil {
		return fmt.Errorf("build log %s: %w", logPath, err)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	cmd := procgroup.Command(ctx, killGrace, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return ErrInterrupted
		}
		return fmt.Errorf("starting %s: %w", argv[0], err)
	}
	var logErr error // the first failed write to the log
	scanDone := make(chan struct{})
	goroutine.Go(func() {
		defer close(scanDone)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if logErr == nil {
				_, logErr = fmt.Fprintln(logf, line)
			}
			if progress != nil {
				progress.Line(line)
			}
		}
		_, _ = io.Copy(io.Discard, pr) // drains the rest; an io.PipeReader reads without error
	})
	wait := func() error {
		err := cmd.Wait()
		_ = pw.Close() // an io.PipeWriter closes without error
		<-scanDone
		return err
	}
	// Left beside the log: if arpatch itself is killed (SIGKILL), the next
	// build of this key finds the group and will not pull the temp dir
	// from under its still-running compilers. A build without it could,
	// so it does not run.
	if err := lockfile.WritePID(filepath.Join(filepath.Dir(logPath), PGIDFile), cmd.PGID()); err != nil {
		stop()
		_ = wait() // the cancel's error
		if progress != nil {
			progress.Done(false)
		}
		return fmt.Errorf("recording the build's process group: %w", err)
	}
	err = wait()
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = ErrInterrupted
	}
	if err == nil && logErr != nil {
		err = fmt.Errorf("build log %s: %w", logPath, logErr)
	}
	if progress != nil {
		progress.Done(err == nil)
	}
	return err
}

func keepLog(c Cache, key, logPath string) string {
	dir := filepath.Join(c.Dir, "logs")
	_ = os.MkdirAll(dir, 0o755) // if it fails, so does Rename, and the log stays where it is
	dst := filepath.Join(dir, key[:16]+"-"+time.Now().UTC().Format("20060102T150405Z")+".log")
	if err := os.Rename(logPath, dst); err != nil {
		return logPath
	}
	return dst
}

func tailLines(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
