package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/internal/errwriter"
	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/progress"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/torchrun"
	"github.com/arpatch/arpatch/patches"
	"github.com/arpatch/arpatch/recipes"
)

// Flags shared by several commands; functions, so that each command gets
// its own flag, writing into dst, a field of its flags struct.
func recipeFlag(dst *string) cli.Flag {
	return &cli.StringFlag{
		Name:        "recipe",
		Destination: dst,
		Usage:       "embedded recipe `NAME` (see `arpatch recipes`), e.g. --recipe pcie",
		Value:       "pcie",
	}
}

func recipeFileFlag(dst *string) cli.Flag {
	return &cli.StringFlag{
		Name:        "recipe-file",
		Destination: dst,
		Usage:       "load the recipe from `PATH` instead, e.g. --recipe-file my-recipe.toml",
	}
}

func srcFlag(dst *string) cli.Flag {
	return &cli.StringFlag{
		Name:        "src",
		Destination: dst,
		Usage:       "SGLang checkout `DIR`, e.g. --src ~/work/sglang",
		Value:       "sglang",
	}
}

func patchesDirFlag(dst *string) cli.Flag {
	return &cli.StringFlag{
		Name:        "patches-dir",
		Destination: dst,
		Usage:       "use the series under `DIR` (shaped like patches/sglang/) instead of the embedded ones",
	}
}

func jsonFlag(dst *bool) cli.Flag {
	return &cli.BoolFlag{Name: "json", Destination: dst, Usage: "print machine-readable JSON instead of text"}
}

// recipeFlags are --recipe and --recipe-file, for a command's flags
// struct to embed.
type recipeFlags struct {
	Recipe, RecipeFile string
}

// flags are --recipe and --recipe-file, writing into f.
func (f *recipeFlags) flags() []cli.Flag {
	return []cli.Flag{recipeFlag(&f.Recipe), recipeFileFlag(&f.RecipeFile)}
}

// load returns the recipe chosen by --recipe-file or --recipe; g are the
// flags given. Both given, an unknown name or a bad file are usage errors.
func (f recipeFlags) load(g given) (*recipes.Recipe, error) {
	if p := f.RecipeFile; p != "" {
		if g["recipe"] {
			return nil, usagef("--recipe and --recipe-file are exclusive; pass one")
		}
		return recipeFile("recipe-file", expandHome(p))
	}
	r, err := recipes.Embedded(f.Recipe)
	if err != nil {
		return nil, usagef("--recipe: %w (or use --recipe-file PATH)", err) // a --recipe that names no recipe
	}
	return r, nil
}

// recipeFile reads the recipe file p that --flag names: one that is
// missing, malformed or out of range is the invocation's mistake (exit 2),
// as a bad flag is; exit 1 means an INVALID or slower arm, a failed check.
// A file that cannot be read is named with the flag; an error inside it
// names its file, line and key.
func recipeFile(flag, p string) (*recipes.Recipe, error) {
	r, err := bench.RecipeFile(p)
	var pe *os.PathError
	switch {
	case errors.As(err, &pe) && pe.Path == p:
		return nil, usagef("--%s: %w", flag, err)
	case err != nil:
		return nil, usageError{err}
	}
	return r, nil
}

// checkPathFlag refuses the value p of a path flag that names nothing, or
// a file where a directory is wanted (dir) or a directory where a file is:
// a usage error (exit 2) naming the flag, found by the options function
// before anything runs; a --src where nothing is, is a
// gitsrc.NoCheckoutError (exit 1), as status and revert say at the
// default --src.
func checkPathFlag(flag, p string, dir bool) error {
	st, err := os.Stat(p)
	var pe *os.PathError
	switch {
	case flag == "src" && dir && errors.Is(err, fs.ErrNotExist):
		// No checkout yet is no usage error: the same exit 1 and remedy
		// (the apply that makes one) as at the default --src, where
		// status and revert find it missing when they open it.
		return gitsrc.NoCheckoutError(p)
	case errors.As(err, &pe):
		return usagef("--%s %s: %v", flag, p, pe.Err)
	case err != nil:
		return usagef("--%s %s: %v", flag, p, err)
	case dir && !st.IsDir():
		return usagef("--%s %s: is a file; name a directory", flag, p)
	case !dir && st.IsDir():
		return usagef("--%s %s: is a directory; name a file", flag, p)
	}
	return nil
}

// catalog returns the series in --patches-dir dir, or the embedded ones
// when dir is empty. A dir that does not load is a usage error.
func catalog(dir string) (*patches.Catalog, error) {
	if dir == "" {
		return patches.Embedded()
	}
	cat, err := patches.LoadDir(expandHome(dir))
	if err != nil {
		return nil, usagef("--patches-dir %w", err)
	}
	return cat, nil
}

// seriesFlag returns the series a --series flag of patches check or port
// names, or a usage error (exit 2) when the catalog lacks it, before
// anything runs. (apply's --series may also name a family:
// patches.Catalog.CheckForce.)
func seriesFlag(cat *patches.Catalog, name string) (*patches.Series, error) {
	s, err := cat.Get(name)
	if err != nil {
		return nil, usagef("--series: %w", err)
	}
	return s, nil
}

// outFile is an output path a flag names ("" when not given); Dir: the
// flag names a directory to write into, not a file.
type outFile struct {
	flag, path string
	dir        bool
}

// inFile is a file a flag names for the command to read.
type inFile struct{ flag, path string }

// checkNotInputs refuses, before anything runs, an output that names a
// file the command reads (safefs.SamePath): arpatch never writes over its
// own input. The usage error names both flags.
func checkNotInputs(outs []outFile, ins ...inFile) error {
	for _, o := range outs {
		for _, in := range ins {
			if o.path != "" && safefs.SamePath(o.path, in.path) {
				return usagef("--%s %s is the file --%s reads: arpatch never writes over its input; name another file (e.g. --%s %s)",
					o.flag, o.path, in.flag, o.flag, safefs.Beside(o.path, "new"))
			}
		}
	}
	return nil
}

// checkOutputs checks, before anything runs, that each output a flag
// names can be written (safefs.CanWrite, safefs.CanWriteIn): a path
// mistake (a file where a directory must be, a directory where the file
// goes) is a usage error (exit 2) naming the flag, not a failure after a
// long run.
func checkOutputs(outs ...outFile) error {
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		check := safefs.CanWrite
		if o.dir {
			check = safefs.CanWriteIn
		}
		if err := check(o.path); err != nil {
			return usagef("--%s: %v", o.flag, err)
		}
	}
	return nil
}

// notePassedOver says which series of --patches-dir were passed over: a
// draft that is not sealed yet must not block the other series beside it.
func notePassedOver(w io.Writer, cat *patches.Catalog) {
	for _, l := range cat.PassedOver() {
		first, _, _ := strings.Cut(l, "\n")
		fmt.Fprintf(w, "arpatch: note: %s\n", first)
	}
}

// writeJSON writes v indented, every nil slice and map in it as [] and
// {} (emptyLists): a list that is empty reads as one, not as null, so
// that `jq '.drift | length'` and a dashboard's loop work on it.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	cp := reflect.New(reflect.TypeOf(v))
	cp.Elem().Set(reflect.ValueOf(v))
	emptyLists(cp.Elem(), 0)
	return enc.Encode(cp.Elem().Interface())
}

// emptyLists sets every nil slice and map reachable from v through
// exported fields, pointers, slices, maps' values of pointer type and
// interfaces to an empty one, in place (v's pointers are followed, so
// the values they point to change too). It stops 32 levels down.
func emptyLists(v reflect.Value, depth int) {
	if depth > 32 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			emptyLists(v.Elem(), depth+1)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				emptyLists(f, depth+1)
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			if v.CanSet() && v.Type().Elem().Kind() != reflect.Uint8 { // []byte is a base64 string
				v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			}
			return
		}
		for i := 0; i < v.Len(); i++ {
			emptyLists(v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.IsNil() {
			if v.CanSet() {
				v.Set(reflect.MakeMap(v.Type()))
			}
			return
		}
		for _, k := range v.MapKeys() {
			if e := v.MapIndex(k); e.Kind() == reflect.Pointer {
				emptyLists(e, depth+1)
			}
		}
	}
}

// closeWritten closes f, a file the command wrote (named by flag), and
// when *err is nil sets it to Close's error: a report or log that did not
// reach the disk fails the command. Use it deferred, with a named result.
func closeWritten(err *error, f *os.File, flag string) {
	if cerr := f.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("%s %s: %w", flag, f.Name(), cerr)
	}
}

// openLog creates --log's file at path and returns the writer a run logs
// through (errwriter.NewLog: a failed write ends the log, not the run) and
// the close to defer with the command's named result: a write that failed
// during the run, or the close, becomes *err as a --log error naming the
// file, unless *err holds the run's own error. The error is os.Create's.
func openLog(path string) (*errwriter.Writer, func(err *error), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	lw := errwriter.NewLog(f)
	return lw, func(err *error) {
		if werr := lw.Err(); werr != nil && *err == nil {
			*err = fmt.Errorf("--log %s: %w", f.Name(), werr)
		}
		closeWritten(err, f, "--log")
	}, nil
}

// shippedDir is where a checkout of arpatch keeps the series it builds
// in, relative to the checkout's root.
const shippedDir = "patches/sglang"

// builtInCopyNote says when the series name that arpatch has built in
// differs from dir/name on disk (dir: a checkout's patches/sglang, as
// the README's `arpatch patches seal patches/sglang/<name>` edits it):
// another patch list, or a patch whose bytes are not the ones built in,
// sealed or not. apply, check and the nightly run the copy built into
// the binary unless given --patches-dir, so the note names the flag
// that runs the copy on disk and the build that builds it in; seal,
// apply and patches check print it. It is ""
// when name is not a built-in series, dir/name holds no series, or the
// two are the same.
func builtInCopyNote(dir, name string) string {
	cat, err := patches.Embedded()
	if err != nil {
		return ""
	}
	built, err := cat.Get(name)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, name, patches.SeriesFile))
	if err != nil {
		return ""
	}
	onDisk, err := patches.LoadSeries(os.DirFS(dir), name, dir+"/")
	same := err == nil && len(onDisk.Patches) == len(built.Patches) && len(b) > 0
	for i := 0; same && i < len(built.Patches); i++ {
		p := built.Patches[i]
		data, err := os.ReadFile(filepath.Join(dir, name, p.File))
		same = err == nil && onDisk.Patches[i].File == p.File && digest.SHA256Hex(data) == p.SHA256
	}
	if same {
		return ""
	}
	return fmt.Sprintf("note: %s differs from the series %s built into this arpatch, which is the one apply, patches check and nightly use: pass `--patches-dir %s` to use the copy on disk, or rebuild arpatch (`go build -o bin/arpatch ./cmd/arpatch`) to build it in",
		filepath.Join(dir, name), name, shellq.Quote(dir))
}

// checkTorch asks python (--python; "" is pyenv.Default) once, before a
// GPU command (bench allreduce, tune allreduce, bench p2p, bench
// --preflight) starts anything, whether it can start torchrun's ranks
// (torchrun.Check): a missing torch is named as Python names it, with
// its remedy, not as rounds of ranks that reported nothing. env nil is
// this process's environment.
func checkTorch(ctx context.Context, python string, env []string) error {
	_, err := torchrun.Check(ctx, pyenv.Or(python), env)
	return err
}

// repoRemedy adds to err, when it names a repository path where nothing
// is (--repo ~/mirrors/sglang.git before the README's set-up step made
// it: gitsrc.NoRepoError, Missing), the command that makes it: a mirror
// of url there, as the README's set-up clones one. A revision refused as
// a usage error (gitsrc.ErrBadRevision, ErrAbbreviated) is named as
// --commit's value.
func repoRemedy(err error, url string) error {
	if errors.Is(err, gitsrc.ErrBadRevision) || errors.Is(err, gitsrc.ErrAbbreviated) {
		// Only --commit carries a revision into apply, ab build and
		// patches check: the usage error names it.
		err = fmt.Errorf("--commit: %w", err)
	}
	var nr *gitsrc.NoRepoError
	if !errors.As(err, &nr) || !nr.Missing {
		return err
	}
	return fmt.Errorf("%w: make a copy of SGLang's history there first (`%s`), or pass --repo with one", err,
		shellq.Join([]string{"git", "clone", "--mirror", cmp.Or(url, recipes.DefaultUpstreamURL), nr.Path}))
}

// caseProgress counts a torchrun's cases on w as they report
// (allreduce.Options.Progress), on a terminal only, as git shows
// progress: one run of bench.py takes minutes. show is nil when w is no
// terminal; end closes a count left short (cases that never reported).
func caseProgress(w io.Writer) (show func(done, total int), end func()) {
	if !progress.IsTerminal(w) {
		return nil, func() {}
	}
	c := progress.New(w, "cases")
	return func(done, total int) { c.Set("measuring", done, total) }, func() { c.Done(false) }
}
