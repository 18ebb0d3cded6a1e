package kernels

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rogpeppe/go-internal/diff"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/internal/digest"
)

// Difference is one file whose bytes differ between two builds of the
// same inputs (or between the arms of an A/B build).
type Difference struct {
	// File names it: an output ("x.whl"), a file inside a wheel
	// ("x.whl!sgl_kernel/common_ops.abi3.so") or an object
	// ("object CMakeFiles/common_ops.dir/csrc/x.cu.o").
	File   string
	A, B   string // sha256 of each side; "" where the file is missing
	Detail string // where the bytes differ, one or more lines
}

// VerifyReport is the outcome of VerifyReproducible.
type VerifyReport struct {
	Key     string
	Cached  *Manifest
	Rebuilt *Manifest
	// Same lists the outputs and objects whose sha256 matched.
	Same        []string
	Differences []Difference
	// Kept is the directory holding the rebuild's outputs when they
	// differ (for inspection); "" when everything matched.
	Kept string
}

// Reproducible reports whether the rebuild gave the cached bytes.
func (r *VerifyReport) Reproducible() bool { return len(r.Differences) == 0 }

// VerifyReproducible rebuilds plan's cached entry from scratch, in a new
// temp directory outside the cache and an emptied build path, and
// compares every output's and every object's sha256 with the cached
// manifest. Each difference says where the bytes differ (ElfSections for
// ELF files, a unified diff for text, the members of a wheel). The cache
// entry is left as it was. It returns an error when the key has no
// entry (build it first), when the toolchain cannot build, or when the
// rebuild fails (a *BuildError, its log kept).
func VerifyReproducible(ctx context.Context, plan *Plan, opts BuildOptions, progress Progress) (*VerifyReport, error) {
	cached, err := opts.Cache.Lookup(plan.Key)
	if err != nil {
		return nil, err
	}
	if cached == nil {
		return nil, fmt.Errorf("no cache entry for key %s in %s to verify: build it first (the same command without --verify-reproducible), then verify", digest.Short(plan.Key), opts.Cache.Dir)
	}
	if plan.Problems != nil {
		return nil, plan.Problems
	}
	unlockTree, err := checkout.Lock(plan.Src)
	if err != nil {
		return nil, err
	}
	defer unlockTree()
	lockTmp, release, err := opts.Cache.Begin(plan.Key) // the key's lock: no build of it meanwhile
	if err != nil {
		return nil, err
	}
	defer release()
	_ = os.RemoveAll(lockTmp) // unused here; a leftover temp is swept by Begin and Prune
	dir, err := os.MkdirTemp("", "arpatch-verify-"+plan.Key[:16]+"-")
	if err != nil {
		return nil, err
	}
	rebuilt, err := produce(ctx, plan, opts, dir, progress)
	// The rebuild's scratch, in the system temp dir: a removal that fails
	// costs disk only, and err is what to report.
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := sameTree(plan); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	rep := &VerifyReport{Key: plan.Key, Cached: cached, Rebuilt: rebuilt}
	rep.Same, rep.Differences = compareBuilds(cached, rebuilt, opts.Cache.EntryDir(plan.Key), dir)
	if rep.Reproducible() {
		_ = os.RemoveAll(dir) // as above: scratch in the system temp dir
	} else {
		rep.Kept = dir
	}
	return rep, nil
}

// compareBuilds compares two builds: each output of a (in dirA) with b's
// of the same name (in dirB), saying where they differ (CompareFiles),
// and the objects both manifests record, by sha256 ("object PATH"; the
// objects themselves are not kept), objects first. same names the outputs that match,
// and "N of M objects" when a records objects.
func compareBuilds(a, b *Manifest, dirA, dirB string) (same []string, diffs []Difference) {
	outB := map[string]Output{}
	for _, o := range b.Outputs {
		outB[o.File] = o
	}
	for _, o := range a.Outputs {
		ob, ok := outB[o.File]
		switch {
		case !ok:
			diffs = append(diffs, Difference{File: o.File, A: o.SHA256, Detail: "only in the first build"})
		case ob.SHA256 == o.SHA256:
			same = append(same, o.File)
		default:
			diffs = append(diffs, CompareFiles(o.File, filepath.Join(dirA, o.File), filepath.Join(dirB, o.File))...)
		}
	}
	if len(a.Objects) > 0 {
		objs := diffSums(a.Objects, b.Objects)
		for i := range objs {
			objs[i].File = "object " + objs[i].File
		}
		// Objects first: the earliest difference is usually the cause.
		diffs = append(objs, diffs...)
		same = append(same, fmt.Sprintf("%d of %d objects", len(a.Objects)-len(objs), len(a.Objects)))
	}
	return same, diffs
}

// diffSums lists the files of two sha256 lists that differ or are on one
// side only, sorted by name.
// For an object recorded with its ELF sections on both sides, the detail
// names the sections that differ, as CompareFiles does for a kept file.
func diffSums(a, b []Output) []Difference {
	am, bm := map[string]Output{}, map[string]Output{}
	names := map[string]bool{}
	for _, o := range a {
		am[o.File], names[o.File] = o, true
	}
	for _, o := range b {
		bm[o.File], names[o.File] = o, true
	}
	var out []Difference
	for _, n := range slices.Sorted(maps.Keys(names)) {
		x, y := am[n], bm[n]
		switch {
		case x.SHA256 == y.SHA256:
		case x.SHA256 == "":
			out = append(out, Difference{File: n, B: y.SHA256, Detail: "only in the second build"})
		case y.SHA256 == "":
			out = append(out, Difference{File: n, A: x.SHA256, Detail: "only in the first build"})
		default:
			d := Difference{File: n, A: x.SHA256, B: y.SHA256}
			switch {
			case len(x.Sections) > 0 && len(y.Sections) > 0:
				if secs := diffSections(x.Sections, y.Sections); len(secs) > 0 {
					d.Detail = "ELF sections that differ: " + strings.Join(secs, ", ")
				} else {
					d.Detail = "ELF: every section's bytes match; the headers or layout differ"
				}
			case len(x.Sections) > 0 || len(y.Sections) > 0:
				d.Detail = "one manifest records its ELF sections and the other does not (made by an older arpatch); rebuild that entry to see which sections differ"
			default:
				d.Detail = fmt.Sprintf("not ELF (%d vs %d bytes); the objects are not kept, only their sha256", x.Bytes, y.Bytes)
			}
			out = append(out, d)
		}
	}
	return out
}

// CompareFiles says where two files named name differ: for wheels (zip
// archives), which members, each compared in turn (the members first, then
// the archive); for ELF files, which
// sections (ElfSections); for text, a unified diff; otherwise the first
// differing byte. Identical files give nothing; an unreadable file gives
// one Difference saying why.
func CompareFiles(name, a, b string) []Difference {
	ab, errA := os.ReadFile(a)
	bb, errB := os.ReadFile(b)
	if err := errors.Join(errA, errB); err != nil {
		return []Difference{{File: name, Detail: err.Error()}}
	}
	return compareBytes(name, ab, bb)
}

func compareBytes(name string, a, b []byte) []Difference {
	if bytes.Equal(a, b) {
		return nil
	}
	d := Difference{File: name, A: digest.SHA256Hex(a), B: digest.SHA256Hex(b)}
	if za, zb, ok := openZips(a, b); ok {
		return compareZips(name, za, zb, d)
	}
	if secs, err := ElfSections(a, b); err == nil {
		if len(secs) == 0 {
			d.Detail = "ELF: every section's bytes match; the headers or layout differ"
		} else {
			d.Detail = "ELF sections that differ: " + strings.Join(secs, ", ")
		}
		return []Difference{d}
	}
	if isText(a) && isText(b) {
		out := string(diff.Diff("first/"+name, a, "second/"+name, b))
		if strings.HasPrefix(out, "diff ") { // the ---/+++ lines name the files already
			_, out, _ = strings.Cut(out, "\n")
		}
		d.Detail = strings.TrimRight(truncateLines(out, 60), "\n")
		return []Difference{d}
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	d.Detail = fmt.Sprintf("binary, %d vs %d bytes, first difference at byte %d", len(a), len(b), i)
	return []Difference{d}
}

func openZips(a, b []byte) (*zip.Reader, *zip.Reader, bool) {
	za, err := zip.NewReader(bytes.NewReader(a), int64(len(a)))
	if err != nil {
		return nil, nil, false
	}
	zb, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, nil, false
	}
	return za, zb, true
}

// compareZips compares two archives member by member.
func compareZips(name string, za, zb *zip.Reader, whole Difference) []Difference {
	read := func(z *zip.Reader) (map[string][]byte, error) {
		m := map[string][]byte{}
		for _, f := range z.File {
			b, err := readEntry(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			m[f.Name] = b
		}
		return m, nil
	}
	ma, err := read(za)
	if err != nil {
		whole.Detail = "first: " + err.Error()
		return []Difference{whole}
	}
	mb, err := read(zb)
	if err != nil {
		whole.Detail = "second: " + err.Error()
		return []Difference{whole}
	}
	names := map[string]bool{}
	for n := range ma {
		names[n] = true
	}
	for n := range mb {
		names[n] = true
	}
	var members []Difference
	for _, n := range slices.Sorted(maps.Keys(names)) {
		label := name + "!" + n
		a, inA := ma[n]
		b, inB := mb[n]
		switch {
		case !inA:
			members = append(members, Difference{File: label, B: digest.SHA256Hex(b), Detail: "only in the second build"})
		case !inB:
			members = append(members, Difference{File: label, A: digest.SHA256Hex(a), Detail: "only in the first build"})
		default:
			members = append(members, compareBytes(label, a, b)...)
		}
	}
	if len(members) == 0 {
		whole.Detail = "the same files with the same bytes; the archive itself (entry order, times, modes) differs"
	} else {
		var names []string
		for _, m := range members {
			names = append(names, strings.TrimPrefix(m.File, name+"!"))
		}
		whole.Detail = "files inside that differ: " + strings.Join(names, ", ")
	}
	return append(members, whole)
}

// ElfSections lists the sections of two ELF files whose contents or
// sizes differ, as "NAME (SIZE_A vs SIZE_B bytes)" or "NAME" when the
// sizes match, in the first file's order then the second's extras. A
// section name that repeats (COMDAT groups in objects) is numbered
// "NAME#2", ... It returns an error when either is not ELF (debug/elf).
func ElfSections(a, b []byte) ([]string, error) {
	sa, err := ElfSectionSums(a)
	if err != nil {
		return nil, err
	}
	sb, err := ElfSectionSums(b)
	if err != nil {
		return nil, err
	}
	return diffSections(sa, sb), nil
}

// ElfSectionSums lists an ELF file's sections in file order with their
// sizes and the sha256 of their contents; a name that repeats is numbered
// "NAME#2", ... It returns debug/elf's error for a file that is not ELF.
func ElfSectionSums(data []byte) ([]Section, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var out []Section
	seen := map[string]int{}
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NULL {
			continue
		}
		name := s.Name
		if seen[name]++; seen[name] > 1 {
			name = fmt.Sprintf("%s#%d", name, seen[name])
		}
		sec := Section{Name: name, Size: s.Size}
		if s.Type != elf.SHT_NOBITS {
			b, _ := s.Data()
			sec.SHA256 = digest.SHA256Hex(b)
		}
		out = append(out, sec)
	}
	return out, nil
}

// diffSections names the sections whose contents or sizes differ, as
// "NAME (SIZE_A vs SIZE_B bytes)" or "NAME" when the sizes match, in the
// first list's order then the second's extras.
func diffSections(a, b []Section) []string {
	mb := map[string]Section{}
	for _, s := range b {
		mb[s.Name] = s
	}
	ma := map[string]bool{}
	var out []string
	for _, x := range a {
		ma[x.Name] = true
		y, ok := mb[x.Name]
		switch {
		case !ok:
			out = append(out, x.Name+" (only in the first)")
		case x.Size != y.Size:
			out = append(out, fmt.Sprintf("%s (%d vs %d bytes)", x.Name, x.Size, y.Size))
		case x.SHA256 != y.SHA256:
			out = append(out, x.Name)
		}
	}
	for _, y := range b {
		if !ma[y.Name] {
			out = append(out, y.Name+" (only in the second)")
		}
	}
	return out
}

func isText(b []byte) bool {
	return utf8.Valid(b) && !bytes.Contains(b, []byte{0})
}

func truncateLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "") + fmt.Sprintf("... (%d more lines)\n", len(lines)-n)
}
