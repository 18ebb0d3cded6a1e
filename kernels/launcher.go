package kernels

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/arpatch/arpatch/internal/cudaarch"
)

// LaunchArgs returns the compiler command that `arpatch gencode-filter`
// runs for args (the command CMake hands its compiler launcher), given
// the build's environment (getenv):
//   - nvcc's -gencode options are cut to the archs of GencodeEnv
//     (FilterGencode); kept lists what stays;
//   - when PrefixMapEnv is set, the reproducibility flags are added right
//     after the program: HostReproFlags for a host compiler, NVCCReproFlags
//     for nvcc (--objdir-as-tempdir when ObjTempEnv is 1), with
//     -frandom-seed set to the object's path (-o) after the maps, which is
//     the same in every build and different for every object.
//
// It returns an error naming GencodeEnv when that holds no valid arch.
func LaunchArgs(args []string, getenv func(string) string) (out []string, kept []cudaarch.Arch, err error) {
	out = args
	if v := getenv(GencodeEnv); v != "" {
		archs, err := cudaarch.Parse([]string{v})
		if err != nil {
			return nil, nil, fmt.Errorf("gencode-filter: $%s: %w", GencodeEnv, err)
		}
		out, _ = FilterGencode(args, archs)
		kept = KeptArchs(out, archs)
	}
	mapEnv := getenv(PrefixMapEnv)
	if mapEnv == "" || len(out) == 0 {
		return out, kept, nil
	}
	maps := strings.Split(mapEnv, ";")
	seed := "arpatch"
	for i, a := range out {
		if a == "-o" && i+1 < len(out) {
			seed = mapPath(out[i+1], maps)
		}
	}
	var flags []string
	if isNVCC(out[0]) {
		flags = NVCCReproFlags(maps, seed, getenv(ObjTempEnv) == "1")
	} else {
		flags = HostReproFlags(maps, seed)
	}
	return append(append([]string{out[0]}, flags...), out[1:]...), kept, nil
}

// isNVCC tells nvcc from a host compiler by the program's name.
func isNVCC(prog string) bool {
	return strings.TrimSuffix(filepath.Base(prog), ".exe") == "nvcc"
}

// mapPath applies the "OLD=NEW" map with the longest OLD that is a
// prefix of p (as the compilers do with the maps' order makeReproducible
// gives them).
func mapPath(p string, maps []string) string {
	best, repl := "", ""
	for _, m := range maps {
		old, r, ok := strings.Cut(m, "=")
		if ok && (p == old || strings.HasPrefix(p, old+"/")) && len(old) > len(best) {
			best, repl = old, r
		}
	}
	if best == "" {
		return p
	}
	return repl + strings.TrimPrefix(p, best)
}

// Launch is `arpatch gencode-filter`: it rewrites args with LaunchArgs
// from the process environment, appends the kept archs to the file named
// by GencodeLogEnv (one per line), and replaces itself with the compiler.
// It returns only on an error, naming the compiler it could not run.
func Launch(args []string) error {
	out, kept, err := LaunchArgs(args, os.Getenv)
	if err != nil {
		return err
	}
	if log := os.Getenv(GencodeLogEnv); log != "" {
		// The build checks this log for every arch it asked for: a log
		// that lost a line would report an arch as not compiled.
		if err := appendArchs(log, kept); err != nil {
			return fmt.Errorf("gencode-filter: %s: %w", GencodeLogEnv, err)
		}
	}
	prog, err := exec.LookPath(out[0])
	if err != nil {
		return fmt.Errorf("gencode-filter: %w", err)
	}
	return syscall.Exec(prog, out, os.Environ())
}

// appendArchs appends each arch, one a line, to the file at path,
// creating it.
func appendArchs(path string, archs []cudaarch.Arch) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	for _, a := range archs {
		if _, err = fmt.Fprintln(f, a); err != nil {
			break
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
