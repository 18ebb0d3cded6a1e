package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"mvdan.cc/sh/v3/shell"

	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/gitsrc/githash"
	"github.com/arpatch/arpatch/internal/pgtest"
	"github.com/arpatch/arpatch/internal/testbin"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/kernels"
)

func TestMain(m *testing.M) {
	if os.Getenv(goPanicEnv) == "1" { // TestGoroutinePanicExitsInternal's child
		os.Exit(runMainApp(withGoPanic))
	}
	testscript.Main(m, map[string]func(){
		"arpatch": func() { os.Exit(runMain()) },
	})
}

// TestScripts runs the CLI scripts in testdata/script. Each script carries
// its fixture upstream tree, recipe and patch series inline. A series a
// script only uses comes sealed (each [[patch]]'s sha256 written in):
// apply.txtar, refusals.txtar, port.txtar and nightly_port.txtar run
// `arpatch patches seal` itself, and a fixture patch edited without its
// new sha256 is refused with that remedy.
//
// Extra commands:
//
//	mkrepo DIR [VAR]     git init DIR, commit its files, set $VAR (default COMMIT) to the hash
//	commit DIR VAR       commit every change in DIR, set $VAR to the hash
//	subst FILE...        expand $VARS in the files
//	treehash DIR VAR     set $VAR to a hash of DIR's files (not .git/) and its apply state
//	sametree DIR VAR     fail unless DIR hashes to $VAR
//	lockpid FILE         write a lock file naming a live pid (the test's)
//	fakebin              put the fake CUDA toolchain of kernels/testdata first on PATH, and set
//	                     $HOSTCXX to the host's c++ it shadows (a script whose apply runs the
//	                     gate judge on a real series sets CXX=$HOSTCXX: kernelsim compiles with it)
//	fakesmi HOST         put a fake nvidia-smi first on PATH, printing harness/doctor/testdata/HOST,
//	                     and a fake lspci printing its lspci-vvv.txt (nothing without one)
//	fixture HOST FILE    copy harness/doctor/testdata/HOST/FILE into the script's directory
//	repolink PATH        link the repository's PATH at $WORK/PATH (examples run from the root)
//	demosetpci DIR       write DIR/setpci: pciutils' setpci in demo mode (-D: it reads and
//	                     checks a command, writes nothing), or without one a check of the
//	                     `setpci -s BDF ECAP_ACS+0x6.w=0000` form
//	short VAR NEW        set $NEW to the first 12 hex digits of $VAR (a commit)
//	remedy [-sub OLD=NEW] [REGEXP]
//	                     run the `arpatch ...` command the previous command printed in
//	                     backquotes (the one matching REGEXP; exactly one must), split as a
//	                     shell would; -sub replaces a word first (a mirror a test cannot make)
//	shremedy REGEXP...   run, with sh -c in the script's directory, in order, the commands the
//	                     previous command printed in backquotes that match each REGEXP (exactly
//	                     one each): a printed git or rm remedy must run as printed
//	usage ARGS...        run `arpatch ARGS...` in this process and require exit 2, a usage
//	                     error; its output is the script's stdout and stderr (below)
//	pgschema VAR         set $VAR to the postgres:// URL of a new, empty schema on the
//	                     [postgres] server (a PostgreSQL server: $ARPATCH_TEST_POSTGRES's, or
//	                     one internal/pgtest starts), dropped when the script ends
//	tgz DIR FILE VAR     write FILE, a gzip'd tar of DIR's files under one top directory
//	                     (GitHub's archive shape, fixed bytes), and set $VAR to its sha256
//
// Variables: $METRICS is stats.Table's names joined by commas (the CSV
// export's metric columns), $METRICS_KNOWN the same joined by ", " (the
// list an unknown --metric is told), so that adding a metric edits no
// script.
//
//	fakeranks FILE       write harness/tune/testdata/fakeranks.sh (fake torchrun ranks) to FILE
//	shippedseries DIR    copy the shipped series (patches/sglang) to DIR
//	stubp2p DIR          write harness/p2p/testdata/stubranks.sh as DIR/python3: torchrun's
//	                     ranks as p2p.py on its stub device ($P2P_STUB: its faults), any
//	                     other python3 call to the python3 after DIR on PATH
func TestScripts(t *testing.T) {
	mirror, _ := filepath.Abs(os.Getenv("ARPATCH_SGLANG_MIRROR"))
	// [postgres]: a PostgreSQL server (internal/pgtest's: the one of
	// $ARPATCH_TEST_POSTGRES, else one it starts), started only when a
	// script asks and stopped after the scripts.
	t.Cleanup(pgtest.Stop)
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		// Builds run in a fixed build path; each script gets its own, so
		// scripts (and other test runs on the machine) never share one.
		// [mirror]: $SGLANG_MIRROR is a copy of SGLang's history (set
		// ARPATCH_SGLANG_MIRROR), so examples that name upstream's commits
		// run through; without it they run against fixtures and stop where
		// the history is missing.
		Setup: func(env *testscript.Env) error {
			env.Setenv(kernels.BuildRootEnv, filepath.Join(env.WorkDir, "broot"))
			// Working files arpatch makes unasked (bench-logs/, ab/) go
			// to the state directory: the script's own.
			env.Setenv("ARPATCH_STATE", filepath.Join(env.WorkDir, "state"))
			// doctor reads /proc and /sys under $ARPATCH_SYSROOT: an empty
			// one, not the machine's, unless a script makes one.
			env.Setenv("ARPATCH_SYSROOT", filepath.Join(env.WorkDir, "sysroot"))
			env.Setenv("METRICS", strings.Join(stats.Names(), ","))
			env.Setenv("METRICS_KNOWN", stats.Known())
			if os.Getenv("ARPATCH_SGLANG_MIRROR") != "" {
				env.Setenv("SGLANG_MIRROR", mirror)
			}
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "mirror":
				return os.Getenv("ARPATCH_SGLANG_MIRROR") != "", nil
			case "postgres":
				u, _ := pgtest.Server()
				return u != "", nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"mkrepo": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) < 1 || len(args) > 2 {
					ts.Fatalf("usage: mkrepo DIR [VAR]")
				}
				c, err := testrepo.Init(ts.MkAbs(args[0]))
				ts.Check(err)
				v := "COMMIT"
				if len(args) == 2 {
					v = args[1]
				}
				ts.Setenv(v, c)
			},
			"commit": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: commit DIR VAR")
				}
				c, err := testrepo.Commit(ts.MkAbs(args[0]), "fixture change")
				ts.Check(err)
				ts.Setenv(args[1], c)
			},
			"subst": func(ts *testscript.TestScript, neg bool, args []string) {
				for _, f := range args {
					b, err := os.ReadFile(ts.MkAbs(f))
					ts.Check(err)
					ts.Check(os.WriteFile(ts.MkAbs(f), []byte(os.Expand(string(b), ts.Getenv)), 0o644))
				}
			},
			"treehash": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: treehash DIR VAR")
				}
				ts.Setenv(args[1], treeHash(ts, ts.MkAbs(args[0])))
			},
			"lockpid": func(ts *testscript.TestScript, neg bool, args []string) {
				// Write a lock file held by a live process: this test's.
				if len(args) != 1 {
					ts.Fatalf("usage: lockpid FILE")
				}
				ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644))
			},
			"sqlexec": func(ts *testscript.TestScript, neg bool, args []string) {
				// Run SQL on a history database behind arpatch's back: to
				// plant a failure.
				if len(args) != 2 {
					ts.Fatalf("usage: sqlexec DB STATEMENT")
				}
				db, err := sql.Open("sqlite", ts.MkAbs(args[0]))
				ts.Check(err)
				_, err = db.Exec(args[1])
				if cerr := db.Close(); err == nil {
					err = cerr
				}
				ts.Check(err)
			},
			"pgschema": func(ts *testscript.TestScript, neg bool, args []string) {
				// A new, empty schema on the [postgres] server, dropped
				// with the script: $VAR is its postgres:// URL.
				if len(args) != 1 {
					ts.Fatalf("usage: pgschema VAR")
				}
				base, why := pgtest.Server()
				if base == "" {
					ts.Fatalf("pgschema: no PostgreSQL server (guard the script with [postgres]): %s", why)
				}
				name := fmt.Sprintf("script%d_%d", os.Getpid(), pgSchemas.Add(1))
				db, err := sql.Open("pgx", base)
				ts.Check(err)
				_, err = db.Exec("CREATE SCHEMA " + name)
				ts.Check(err)
				ts.Defer(func() {
					_, _ = db.Exec("DROP SCHEMA " + name + " CASCADE") // the server is the tests' own
					_ = db.Close()
				})
				ts.Setenv(args[0], pgtest.WithParam(base, "search_path", name))
			},
			"fakebin": func(ts *testscript.TestScript, neg bool, args []string) {
				// Put arpatch's fake CUDA toolchain (kernels/testdata/fakebin,
				// read only: no script writes there) first on PATH.
				dir, err := filepath.Abs(filepath.Join("..", "..", "kernels", "testdata", "fakebin"))
				ts.Check(err)
				// The host's c++ the fake one shadows: the gate judge's
				// kernelsim compiles and runs its driver with $CXX, else
				// the c++ on PATH, which the fake's output is not.
				ts.Setenv("HOSTCXX", "")
				for _, d := range filepath.SplitList(ts.Getenv("PATH")) {
					if fi, err := os.Stat(filepath.Join(d, "c++")); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
						ts.Setenv("HOSTCXX", filepath.Join(d, "c++"))
						break
					}
				}
				ts.Setenv("PATH", dir+string(os.PathListSeparator)+ts.Getenv("PATH"))
			},
			"fakesmi": func(ts *testscript.TestScript, neg bool, args []string) {
				// Put a fake nvidia-smi first on PATH that prints the
				// outputs recorded in harness/doctor/testdata/HOST.
				if len(args) != 1 {
					ts.Fatalf("usage: fakesmi HOST")
				}
				src, err := filepath.Abs(filepath.Join("..", "..", "harness", "doctor", "testdata", args[0]))
				ts.Check(err)
				dst := ts.MkAbs("smibin")
				ts.Check(os.MkdirAll(dst, 0o755))
				// The recorded files end in a newline: the shell prints
				// them line by line, with no cat process per call.
				script := "#!/bin/sh\nd='" + src + "'\n" +
					"out() { while IFS= read -r l; do printf '%s\\n' \"$l\"; done < \"$d/$1\"; }\n" +
					"case \"$*\" in\n" +
					"--query-gpu=*) out query-gpu.csv;;\n" +
					"'topo -m') out topo-m.txt;;\n" +
					"'topo -p2p r') out topo-p2p-r.txt;;\n" +
					"'topo -p2p w') out topo-p2p-w.txt;;\n" +
					"*) echo \"fake nvidia-smi: nothing recorded for: $*\" >&2; exit 9;;\nesac\n"
				ts.Check(testbin.Write(filepath.Join(dst, "nvidia-smi"), []byte(script)))
				// lspci: the host's rendering, or none (this machine's own
				// devices would be judged otherwise).
				lspci := "#!/bin/sh\n"
				if _, err := os.Stat(filepath.Join(src, "lspci-vvv.txt")); err == nil {
					lspci += "d='" + src + "'\nwhile IFS= read -r l; do printf '%s\\n' \"$l\"; done < \"$d/lspci-vvv.txt\"\n"
				}
				ts.Check(testbin.Write(filepath.Join(dst, "lspci"), []byte(lspci)))
				ts.Setenv("PATH", dst+string(os.PathListSeparator)+ts.Getenv("PATH"))
			},
			"short": func(ts *testscript.TestScript, neg bool, args []string) {
				// short VAR NEW [N]: NEW is $VAR's first N hex digits
				// (12, the short hash arpatch prints, by default).
				if len(args) < 2 || len(args) > 3 || len(ts.Getenv(args[0])) < 12 {
					ts.Fatalf("usage: short VAR NEW [N] (with $VAR a commit hash)")
				}
				h := githash.Hash(ts.Getenv(args[0])).Short()
				if len(args) == 3 {
					n, err := strconv.Atoi(args[2])
					if err != nil || n < 1 || n > len(h) {
						ts.Fatalf("short: N %q is not 1 to %d", args[2], len(h))
					}
					h = h[:n]
				}
				ts.Setenv(args[1], h)
			},
			"usage": func(ts *testscript.TestScript, neg bool, args []string) {
				runUsage(ts, neg, args)
			},
			"remedy": func(ts *testscript.TestScript, neg bool, args []string) {
				// Run the arpatch command the previous command printed
				// in backquotes, as printed: a remedy must run.
				runRemedy(ts, neg, args)
			},
			"shremedy": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) == 0 {
					ts.Fatalf("usage: shremedy REGEXP...")
				}
				out := ts.ReadFile("stdout") + ts.ReadFile("stderr")
				for _, a := range args {
					filter := regexp.MustCompile(a)
					var cmds []string
					for _, m := range backquoted.FindAllStringSubmatch(out, -1) {
						if filter.MatchString(m[1]) && !slices.Contains(cmds, m[1]) {
							cmds = append(cmds, m[1])
						}
					}
					if len(cmds) != 1 {
						ts.Fatalf("shremedy: want one backquoted command matching %q in the output, found %q", a, cmds)
					}
					ts.Logf("shremedy: %s", cmds[0])
					err := ts.Exec("sh", "-c", cmds[0])
					if err != nil && !neg {
						ts.Fatalf("remedy %q failed: %v", cmds[0], err)
					}
					if err == nil && neg {
						ts.Fatalf("remedy %q succeeded unexpectedly", cmds[0])
					}
				}
			},
			"tgz": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 3 {
					ts.Fatalf("usage: tgz DIR FILE VAR")
				}
				b := tgz(ts, ts.MkAbs(args[0]))
				ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, 0o644))
				sum := sha256.Sum256(b)
				ts.Setenv(args[2], hex.EncodeToString(sum[:]))
			},
			"fakeranks": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: fakeranks FILE")
				}
				b, err := os.ReadFile(filepath.Join("..", "..", "harness", "tune", "testdata", "fakeranks.sh"))
				ts.Check(err)
				ts.Check(os.MkdirAll(filepath.Dir(ts.MkAbs(args[0])), 0o755))
				ts.Check(testbin.Write(ts.MkAbs(args[0]), b))
			},
			"repolink": func(ts *testscript.TestScript, neg bool, args []string) {
				// Link the repository's PATH (read only: no script writes
				// there) at the same path under $WORK, so that an example
				// run from the repository root runs as printed.
				if len(args) != 1 {
					ts.Fatalf("usage: repolink PATH")
				}
				src, err := filepath.Abs(filepath.Join("..", "..", args[0]))
				ts.Check(err)
				dst := ts.MkAbs(args[0])
				ts.Check(os.MkdirAll(filepath.Dir(dst), 0o755))
				ts.Check(os.Symlink(src, dst))
			},
			"fixture": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: fixture HOST FILE")
				}
				b, err := os.ReadFile(filepath.Join("..", "..", "harness", "doctor", "testdata", args[0], args[1]))
				ts.Check(err)
				ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, 0o644))
			},
			"demosetpci": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: demosetpci DIR")
				}
				b, err := os.ReadFile(filepath.Join("..", "..", "harness", "doctor", "testdata", "setpci-demo.sh"))
				ts.Check(err)
				ts.Check(os.MkdirAll(ts.MkAbs(args[0]), 0o755))
				ts.Check(testbin.Write(filepath.Join(ts.MkAbs(args[0]), "setpci"), b))
			},
			"shippedseries": func(ts *testscript.TestScript, neg bool, args []string) {
				// Copy the series arpatch ships (patches/sglang, as a
				// checkout of arpatch holds them) to DIR.
				if len(args) != 1 {
					ts.Fatalf("usage: shippedseries DIR")
				}
				ts.Check(os.CopyFS(ts.MkAbs(args[0]), os.DirFS(filepath.Join("..", "..", "patches", "sglang"))))
			},
			"stubp2p": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: stubp2p DIR")
				}
				b, err := os.ReadFile(filepath.Join("..", "..", "harness", "p2p", "testdata", "stubranks.sh"))
				ts.Check(err)
				ts.Check(os.MkdirAll(ts.MkAbs(args[0]), 0o755))
				ts.Check(testbin.Write(filepath.Join(ts.MkAbs(args[0]), "python3"), b))
			},
			"sametree": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: sametree DIR VAR")
				}
				same := treeHash(ts, ts.MkAbs(args[0])) == ts.Getenv(args[1])
				if same == neg {
					ts.Fatalf("tree %s: same as $%s = %v, want %v", args[0], args[1], same, !neg)
				}
			},
		},
	})
}

// pgSchemas numbers the schemas pgschema makes.
var pgSchemas atomic.Int64

// tgz returns a gzip'd tar of the regular files under dir, in path order,
// each under the top directory <base of dir>-rev/ with a fixed time.
func tgz(ts *testscript.TestScript, dir string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	top := filepath.Base(dir) + "-rev/"
	mt := time.Date(2026, 7, 29, 0, 0, 0, 0, time.UTC)
	ts.Check(filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: top + filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)), ModTime: mt}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}))
	ts.Check(tw.Close())
	ts.Check(zw.Close())
	return buf.Bytes()
}

// treeHash is the testrepo.Snapshot Hash of every path, mode and content
// under dir except .git/, plus the apply state file (or its absence), so
// a changed, added or removed byte shows.
func treeHash(ts *testscript.TestScript, dir string) string {
	s, err := testrepo.SnapshotTree(dir, testrepo.SnapshotOptions{Extra: []string{".git/arpatch/state.json"}})
	ts.Check(err)
	return s.Hash()
}

// runUsage is the script command usage: arpatch's run, as main calls it
// and as TestExitCodes does, on a flag or value it must refuse before
// anything runs (exit 2), without starting the 42 MB test binary as a
// process. It runs in the test process, in the package directory with the
// test's environment, not the script's: only for a refusal that depends on
// no file and no variable of the script (one that read a file would read
// the package directory's). A command that does not refuse stops once its
// options are made (optionsOnly), and fails the script, instead of
// running here.
func runUsage(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: usage ARGS... (no !: it requires exit 2)")
	}
	ctx := context.WithValue(context.Background(), optionsOnly{}, true)
	if code := run(ctx, append([]string{"arpatch"}, args...), ts.Stdout(), ts.Stderr()); code != exitUsage {
		ts.Fatalf("arpatch %s: exit %d, want %d (a usage error)", strings.Join(args, " "), code, exitUsage)
	}
}

var remedyRe = regexp.MustCompile("`(arpatch [^`]+)`")

var backquoted = regexp.MustCompile("`([^`]+)`")

// runRemedy is the script command remedy.
func runRemedy(ts *testscript.TestScript, neg bool, args []string) {
	sub := map[string]string{}
	for len(args) >= 2 && args[0] == "-sub" {
		old, new, ok := strings.Cut(args[1], "=")
		if !ok {
			ts.Fatalf("remedy: -sub wants OLD=NEW")
		}
		sub[old] = new
		args = args[2:]
	}
	var filter *regexp.Regexp
	if len(args) == 1 {
		filter = regexp.MustCompile(args[0])
	} else if len(args) > 1 {
		ts.Fatalf("usage: remedy [-sub OLD=NEW] [REGEXP]")
	}
	out := ts.ReadFile("stdout") + ts.ReadFile("stderr")
	var cmds []string
	for _, m := range remedyRe.FindAllStringSubmatch(out, -1) {
		if (filter == nil || filter.MatchString(m[1])) && !slices.Contains(cmds, m[1]) {
			cmds = append(cmds, m[1])
		}
	}
	if len(cmds) != 1 {
		ts.Fatalf("remedy: want one `arpatch ...` command in the last output, found %q", cmds)
	}
	words, err := shell.Fields(cmds[0], func(string) string { return "" })
	ts.Check(err)
	for i, w := range words {
		if n, ok := sub[w]; ok {
			words[i] = n
		}
	}
	ts.Logf("remedy: %s", strings.Join(words, " "))
	err = ts.Exec(words[0], words[1:]...)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == exitUsage {
		ts.Fatalf("remedy %q is refused as a usage error (exit 2)", cmds[0])
	}
	if err != nil && !neg {
		ts.Fatalf("remedy %q failed: %v", cmds[0], err)
	}
	if err == nil && neg {
		ts.Fatalf("remedy %q succeeded unexpectedly", cmds[0])
	}
}
