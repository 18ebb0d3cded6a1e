package kernels

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// ABFile is one file whose bytes differ between the arms of an A/B
// build, and whether the patches explain it.
type ABFile struct {
	File      string `json:"file"` // as in Difference.File
	Explained bool   `json:"explained"`
	// Why says what explains it (that it is built from a patched file,
	// e.g. "csrc/x.cu"), or why nothing does.
	Why string `json:"why"`
}

// ABDiff lists the files whose bytes differ between A's and B's build
// (the outputs, the files inside a wheel, and the objects the manifests
// record) and judges each: an object is explained when its translation
// unit is a file the two arms' patches leave different, or includes one
// (#include, followed through the tree); a shared object, when some
// differing object is explained (it contains them); RECORD, when other
// files of its wheel differ (it holds their hashes); the wheel, when the
// files inside it that differ are all explained. Everything else, such
// as a Python file or METADATA that differs, or any difference at all
// when the patches change no file the build reads, is unexplained.
// a and b are the arms' plans (for their trees and apply states), ma and
// mb their manifests, entryA and entryB the directories holding their
// outputs. An unreadable output is reported as an unexplained difference.
func ABDiff(a, b *Plan, ma, mb *Manifest, entryA, entryB string) []ABFile {
	changed := changedFiles(a, b)
	_, all := compareBuilds(ma, mb, entryA, entryB)
	var diffs, objs []Difference
	for _, d := range all {
		if strings.HasPrefix(d.File, "object ") {
			objs = append(objs, d)
		} else {
			diffs = append(diffs, d)
		}
	}
	var out []ABFile
	explainedObjects := 0
	for _, d := range objs {
		f := ABFile{File: d.File}
		tu := objectSource(strings.TrimPrefix(d.File, "object "))
		// Name the unit as the patches name files: by its path in the tree.
		unit := treePath(b.Src, b.Stage, tu)
		if src, ok := explainingSource(b.Src, b.Stage, tu, changed); ok {
			f.Explained, f.Why = true, "built from "+src
			if src != unit {
				f.Why = "built from " + unit + ", which includes the patched " + src
			}
			explainedObjects++
		} else {
			f.Why = "built from " + unit + ", which no patch changes and which includes no patched file"
		}
		out = append(out, f)
	}
	// Files inside archives first, then the archives themselves.
	sort.SliceStable(diffs, func(i, j int) bool {
		return strings.Contains(diffs[i].File, "!") && !strings.Contains(diffs[j].File, "!")
	})
	unexplainedInside := map[string]int{}
	differingInside := map[string]int{} // less RECORD
	for _, d := range diffs {
		if archive, member, inside := strings.Cut(d.File, "!"); inside && !isRecord(member) {
			differingInside[archive]++
		}
	}
	for _, d := range diffs {
		f := ABFile{File: d.File}
		archive, member, inside := strings.Cut(d.File, "!")
		name := d.File
		if inside {
			name = member
		}
		switch {
		case inside && isRecord(member) && differingInside[archive] > 0:
			f.Explained, f.Why = true, "holds the sha256 of the other files that differ"
		case isSharedObject(name) && explainedObjects > 0:
			f.Explained, f.Why = true, fmt.Sprintf("a shared object, and %s built from patched files %s (above)", textfmt.Plural(explainedObjects, "object", "objects"), textfmt.Word(explainedObjects, "differs", "differ"))
		case isSharedObject(name) && len(ma.Objects) == 0:
			f.Why = "differs, and the manifests record no objects to explain it (built before arpatch recorded them); build again with an empty cache"
		case isSharedObject(name):
			f.Why = "differs, but no object built from a patched file does"
		case !inside && strings.HasSuffix(name, ".whl") && unexplainedInside[name] == 0 && differingInside[name] > 0:
			f.Explained, f.Why = true, "holds the files above"
		case !inside && strings.HasSuffix(name, ".whl") && differingInside[name] == 0:
			f.Why = "the same files with the same bytes, archived differently"
		default:
			f.Why = "no patch explains it: " + textfmt.FirstLine(d.Detail)
		}
		if inside && !f.Explained {
			unexplainedInside[archive]++
		}
		if !inside && !f.Explained && strings.HasSuffix(name, ".whl") && unexplainedInside[name] > 0 {
			f.Why = fmt.Sprintf("holds %d differing files that no patch explains", unexplainedInside[name])
		}
		out = append(out, f)
	}
	return out
}

// changedFiles lists the tree paths whose bytes the two arms' apply
// states leave different.
func changedFiles(a, b *Plan) map[string]bool {
	after := func(p *Plan) map[string]string {
		m := map[string]string{}
		if p.State != nil {
			for _, f := range p.State.Files {
				m[f.Path] = f.After
			}
		}
		return m
	}
	fa, fb := after(a), after(b)
	out := map[string]bool{}
	for p, s := range fa {
		if fb[p] != s {
			out[p] = true
		}
	}
	for p, s := range fb {
		if fa[p] != s {
			out[p] = true
		}
	}
	return out
}

// objectSource turns an object's path under the build dir into its
// source's path under the project, as CMake names objects:
// "CMakeFiles/common_ops.dir/csrc/x.cu.o" is "csrc/x.cu". Objects of
// the extension ("custom_all_reduce.cuda.o") keep their name.
func objectSource(obj string) string {
	obj = strings.TrimSuffix(strings.TrimSuffix(obj, ".o"), ".obj")
	if i := strings.Index(obj, ".dir/"); i >= 0 && strings.HasPrefix(obj, "CMakeFiles/") {
		return obj[i+len(".dir/"):]
	}
	return obj
}

var includeLine = lazyre.New(`(?m)^\s*#\s*include\s*[<"]([^>"]+)[>"]`)

// explainingSource returns the changed tree path that tu (a path under
// one of stage's project directories of the tree at src) is or includes,
// following #include lines through files found next to the includer or
// under the project's include/ and csrc/ directories.
func explainingSource(src string, stage []string, tu string, changed map[string]bool) (string, bool) {
	for _, proj := range stage {
		start := path.Join(proj, tu)
		seen := map[string]bool{}
		var walk func(p string, depth int) (string, bool)
		walk = func(p string, depth int) (string, bool) {
			if seen[p] || depth > 32 {
				return "", false
			}
			seen[p] = true
			if changed[p] {
				return p, true
			}
			b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(p)))
			if err != nil {
				return "", false
			}
			for _, m := range includeLine().FindAllStringSubmatch(string(b), -1) {
				for _, dir := range []string{path.Dir(p), path.Join(proj, "include"), path.Join(proj, "csrc")} {
					inc := path.Join(dir, m[1])
					if _, err := os.Stat(filepath.Join(src, filepath.FromSlash(inc))); err != nil {
						continue
					}
					if s, ok := walk(inc, depth+1); ok {
						return s, true
					}
					break
				}
			}
			return "", false
		}
		if _, err := os.Stat(filepath.Join(src, filepath.FromSlash(start))); err == nil {
			return walk(start, 0)
		}
	}
	return "", false
}

func isSharedObject(name string) bool {
	return strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.")
}

// treePath is tu (a path under one of stage's project directories) as a
// slash path from the tree's root, e.g. "sgl-kernel/csrc/x.cu": the first
// project directory of the tree at src that holds it; tu itself when none
// does (an object of the extension, named after its source's base name).
func treePath(src string, stage []string, tu string) string {
	for _, proj := range stage {
		p := path.Join(proj, tu)
		if _, err := os.Stat(filepath.Join(src, filepath.FromSlash(p))); err == nil {
			return p
		}
	}
	return tu
}
