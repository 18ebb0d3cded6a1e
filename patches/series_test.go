package patches

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/arpatch/arpatch/internal/digest"
)

const dispatchPatch = `Description: dispatch
Author: t
Upstream-Status: Pending
Applies-To: fixture

--- a/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh
+++ b/sgl-kernel/csrc/allreduce/custom_all_reduce.cuh
@@ -1 +1 @@
-} else if (full_nvlink_) {
+} else {
`

const gatePatch = `Description: gate
Author: t
Upstream-Status: Pending
Applies-To: fixture

--- a/python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py
+++ b/python/sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py
@@ -1 +1 @@
-    if world_size > 2 and not full_nvlink:
+    if world_size > 2 and not full_nvlink and not forced:
`

// seriesFS builds a one-series file system; files maps patch names to text.
func seriesFS(toml string, files map[string]string) fstest.MapFS {
	m := fstest.MapFS{"s/series.toml": {Data: []byte(toml)}}
	for n, c := range files {
		m["s/"+n] = &fstest.MapFile{Data: []byte(c)}
	}
	return m
}

func seriesTOML(requires string, entries ...[3]string) string {
	var b strings.Builder
	b.WriteString("name = \"s\"\nfamily = \"pcie\"\n" + requires + "\n")
	for _, e := range entries {
		b.WriteString("\n[[patch]]\nfile = \"" + e[0] + "\"\nsha256 = \"" + e[1] + "\"\nprovides = [" + e[2] + "]\n")
	}
	return b.String()
}

func TestSeriesLoadVerifiesAndParses(t *testing.T) {
	toml := seriesTOML(`requires = [["pcie-gate-bypass", "pcie-dispatch-branch"]]`,
		[3]string{"0001-dispatch.patch", digest.SHA256Hex([]byte(dispatchPatch)), `"pcie-dispatch-branch"`},
		[3]string{"0002-gate.patch", digest.SHA256Hex([]byte(gatePatch)), `"pcie-gate-bypass"`})
	fsys := seriesFS(toml, map[string]string{"0001-dispatch.patch": dispatchPatch, "0002-gate.patch": gatePatch})
	s, err := LoadSeries(fsys, "s", "test/s")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := s.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Name != "0001-dispatch.patch" || ps[1].Provides[0] != TagGateBypass {
		t.Fatalf("patches = %+v", ps)
	}

	// Skipping the dispatch branch leaves the gate bypass alone: refused.
	_, err = s.Load([]string{"0001-dispatch.patch"})
	var re *RequiresError
	if !errors.As(err, &re) || re.Patch != "0002-gate.patch" || re.Needs != TagDispatchBranch || !strings.Contains(err.Error(), "unreduced data") {
		t.Errorf("skip dispatch: err = %v, want RequiresError naming both", err)
	}
	if _, err := s.Load([]string{"0009-nope.patch"}); err == nil || !strings.Contains(err.Error(), "not in the series") {
		t.Errorf("skip unknown: err = %v", err)
	}

	// One byte changed in a patch: a TamperError with both hashes.
	fsys["s/0002-gate.patch"].Data = []byte(strings.Replace(gatePatch, "forced", "forcd", 1))
	_, err = s.Load(nil)
	var te *TamperError
	if !errors.As(err, &te) || te.Patch != "0002-gate.patch" || te.Want != digest.SHA256Hex([]byte(gatePatch)) || te.Got == te.Want {
		t.Errorf("tampered: err = %v, want TamperError", err)
	}
}

func TestRequiresOrderAndBuiltinRule(t *testing.T) {
	dispatch := &Patch{Name: "0001-d.patch", Provides: []string{TagDispatchBranch}, Diff: mustParse(t, dispatchPatch)}
	gate := &Patch{Name: "0002-g.patch", Provides: []string{TagGateBypass}, Diff: mustParse(t, gatePatch)}
	if err := CheckRequires("s", []*Patch{dispatch, gate}, nil); err != nil {
		t.Errorf("dispatch then gate: %v", err)
	}
	err := CheckRequires("s", []*Patch{gate, dispatch}, nil)
	if err == nil || !strings.Contains(err.Error(), "must come first") {
		t.Errorf("gate before dispatch: err = %v", err)
	}
	// Built in, whatever series.toml says: no declared requires here.
	err = CheckRequires("s", []*Patch{gate}, nil)
	if err == nil || !strings.Contains(err.Error(), "unreduced data") {
		t.Errorf("gate alone: err = %v", err)
	}
	if err := CheckRequires("s", []*Patch{{Name: "0001-d.patch", Diff: mustParse(t, dispatchPatch)}}, nil); err != nil {
		t.Errorf("dispatch alone is fine: %v", err)
	}
	// Labels are all CheckRequires reads: what a patch does to the
	// dispatch is CheckResult's (rules_test.go).
}

func mustParse(t *testing.T, s string) *Diff {
	t.Helper()
	d, err := ParseDiff("p", []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLoadSeriesErrorsNameFileKeyAndLine(t *testing.T) {
	good := digest.SHA256Hex([]byte(dispatchPatch))
	for _, tc := range []struct {
		name, toml, want string
	}{
		{"unknown key", "name = \"s\"\nfamily = \"pcie\"\ncolour = \"red\"\n", `test/s/series.toml:3: unknown key "colour"`},
		{"bad commit", "name = \"s\"\nfamily = \"pcie\"\ntested_on = [\"84118acf\"]\n", `test/s/series.toml:3: tested_on: "84118acf" is not a full 40-hex commit hash: it has 8 hex digits, not 40`},
		{"no family", "name = \"s\"\n", "family: missing"},
		{"name differs", "name = \"t\"\nfamily = \"pcie\"\n", `differs from the directory name "s"`},
		{"no patches", "name = \"s\"\nfamily = \"pcie\"\n", "lists no [[patch]]"},
		{"bad patch name", seriesTOML("", [3]string{"dispatch.diff", good, ""}), "NNNN-name.patch"},
		{"unsealed", seriesTOML("", [3]string{"0001-d.patch", "", ""}), "run `arpatch patches seal test/s`"},
		{"requires unknown", seriesTOML(`requires = [["a", "b"]]`, [3]string{"0001-d.patch", good, ""}), `"a" names no patch file or provides tag`},
		{"syntax", "name = \n", "test/s/series.toml:1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadSeries(seriesFS(tc.toml, nil), "s", "test/s")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestSeriesRefusesUnlistedPatch(t *testing.T) {
	toml := seriesTOML("", [3]string{"0001-dispatch.patch", digest.SHA256Hex([]byte(dispatchPatch)), ""})
	fsys := seriesFS(toml, map[string]string{"0001-dispatch.patch": dispatchPatch, "0002-forgotten.patch": gatePatch})
	if _, err := LoadSeries(fsys, "s", "test/s"); err == nil || !strings.Contains(err.Error(), "0002-forgotten.patch is in the series directory but not listed") {
		t.Errorf("err = %v", err)
	}
}

func TestSealRefusesMalformedPatch(t *testing.T) {
	bad := strings.Replace(gatePatch, "@@ -1 +1 @@\n", "@@ -1 +1 @@\njunk\n", 1)
	toml := seriesTOML("", [3]string{"0001-g.patch", "", ""})
	_, err := Seal(seriesFS(toml, map[string]string{"0001-g.patch": bad}), "s", func(string, []byte) error {
		t.Error("wrote series.toml for a malformed patch")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "inside a hunk") {
		t.Errorf("err = %v", err)
	}
}

func TestSealRewritesOnlyHashes(t *testing.T) {
	toml := "# keep this comment\n" + seriesTOML("", [3]string{"0001-dispatch.patch", "", `"x"`}, [3]string{"0002-gate.patch", strings.Repeat("0", 64), ""})
	fsys := seriesFS(toml, map[string]string{"0001-dispatch.patch": dispatchPatch, "0002-gate.patch": gatePatch})
	var written string
	changed, err := Seal(fsys, "s", func(name string, data []byte) error {
		if name != "s/series.toml" {
			t.Errorf("wrote %s", name)
		}
		written = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(changed, ",") != "0001-dispatch.patch,0002-gate.patch" {
		t.Errorf("changed = %v", changed)
	}
	want := strings.Replace(strings.Replace(toml, `sha256 = ""`, `sha256 = "`+digest.SHA256Hex([]byte(dispatchPatch))+`"`, 1),
		strings.Repeat("0", 64), digest.SHA256Hex([]byte(gatePatch)), 1)
	if written != want {
		t.Errorf("sealed series.toml:\n%s\nwant:\n%s", written, want)
	}
}

// TestSealDropsTheUnsealedLine: a draft of patches port says it is
// unsealed; Seal writes its hashes and takes that line away, keeping the
// rest, and a sealed series that still holds the line (sealed by an
// older arpatch) loses it though no hash changed.
func TestSealDropsTheUnsealedLine(t *testing.T) {
	sealed := seriesTOML("", [3]string{"0001-dispatch.patch", digest.SHA256Hex([]byte(dispatchPatch)), ""}, [3]string{"0002-gate.patch", digest.SHA256Hex([]byte(gatePatch)), ""})
	for _, tc := range []struct{ name, toml string }{
		{"draft", "# Ported.\n" + UnsealedLine + seriesTOML("", [3]string{"0001-dispatch.patch", "", ""}, [3]string{"0002-gate.patch", "", ""})},
		{"sealed before", "# Ported.\n" + UnsealedLine + sealed},
	} {
		fsys := seriesFS(tc.toml, map[string]string{"0001-dispatch.patch": dispatchPatch, "0002-gate.patch": gatePatch})
		var written string
		if _, err := Seal(fsys, "s", func(_ string, data []byte) error { written = string(data); return nil }); err != nil {
			t.Fatal(err)
		}
		if want := "# Ported.\n" + sealed; written != want {
			t.Errorf("%s: sealed series.toml:\n%s\nwant:\n%s", tc.name, written, want)
		}
	}
}

func TestSealRefusesIncompleteSeries(t *testing.T) {
	nowrite := func(string, []byte) error {
		t.Error("wrote series.toml")
		return nil
	}
	toml := seriesTOML("", [3]string{"0001-dispatch.patch", "", ""})
	// A .patch file series.toml does not list.
	_, err := Seal(seriesFS(toml, map[string]string{"0001-dispatch.patch": dispatchPatch, "0002-gate.patch": gatePatch}), "s", nowrite)
	if err == nil || !strings.Contains(err.Error(), "0002-gate.patch is here but not listed in series.toml") {
		t.Errorf("unlisted: %v", err)
	}
	// A listed patch that is not there.
	_, err = Seal(seriesFS(toml, map[string]string{}), "s", nowrite)
	if err == nil || !strings.Contains(err.Error(), "series.toml lists 0001-dispatch.patch, which is not here") {
		t.Errorf("missing patch: %v", err)
	}
	// No series.toml at all.
	_, err = Seal(fstest.MapFS{"s/0001-dispatch.patch": {Data: []byte(dispatchPatch)}}, "s", nowrite)
	if err == nil || !strings.Contains(err.Error(), "no series.toml here") {
		t.Errorf("no series.toml: %v", err)
	}
}

// Issue 11, point 7: a requires cycle is called one, and a missing
// [[patch]] points at the file, not at line 0.
func TestSeriesTOMLMessages(t *testing.T) {
	sha := digest.SHA256Hex([]byte(dispatchPatch))
	for _, tc := range []struct{ toml, want string }{
		{seriesTOML(`requires = [["0001-a.patch", "0002-b.patch"], ["0002-b.patch", "0001-a.patch"]]`,
			[3]string{"0001-a.patch", sha, ""}, [3]string{"0002-b.patch", sha, ""}),
			"test/s/series.toml:3: requires: cycle: 0001-a.patch requires 0002-b.patch requires 0001-a.patch"},
		{seriesTOML(`requires = [["x", "y"], ["y", "z"], ["z", "x"]]`,
			[3]string{"0001-a.patch", sha, `"x"`}, [3]string{"0002-b.patch", sha, `"y"`}, [3]string{"0003-c.patch", sha, `"z"`}),
			"cycle: 0001-a.patch requires 0002-b.patch requires 0003-c.patch requires 0001-a.patch"},
		{seriesTOML(`requires = [["0001-a.patch", "0001-a.patch"]]`, [3]string{"0001-a.patch", sha, ""}),
			"cycle: 0001-a.patch requires 0001-a.patch"},
		{"name = \"s\"\nfamily = \"pcie\"\n", "test/s/series.toml: patch: the series lists no [[patch]]"},
	} {
		files := map[string]string{}
		for _, n := range []string{"0001-a.patch", "0002-b.patch", "0003-c.patch"} {
			if strings.Contains(tc.toml, n) {
				files[n] = dispatchPatch
			}
		}
		_, err := LoadSeries(seriesFS(tc.toml, files), "s", "test/s")
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), ":0:") {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
	// No cycle: a chain.
	ok := seriesTOML(`requires = [["0002-b.patch", "0001-a.patch"], ["0003-c.patch", "0002-b.patch"]]`,
		[3]string{"0001-a.patch", sha, ""}, [3]string{"0002-b.patch", sha, ""}, [3]string{"0003-c.patch", sha, ""})
	if _, err := LoadSeries(seriesFS(ok, map[string]string{"0001-a.patch": dispatchPatch, "0002-b.patch": dispatchPatch, "0003-c.patch": dispatchPatch}), "s", "test/s"); err != nil {
		t.Errorf("chain: %v", err)
	}
}

// TestSealTakesApplysRules: what LoadSeries (apply, check, build)
// refuses, Seal refuses with the same words, but for the hashes it is
// there to write: a 5-digit patch name that seal once took and apply then
// refused, among the others.
func TestSealTakesApplysRules(t *testing.T) {
	nowrite := func(string, []byte) error {
		t.Error("wrote series.toml")
		return nil
	}
	sum := digest.SHA256Hex([]byte(dispatchPatch))
	for _, c := range []struct{ name, toml, file, want string }{
		{"five digits", seriesTOML("", [3]string{"00001-d.patch", "", ""}), "00001-d.patch", `"00001-d.patch": patch files are named NNNN-name.patch`},
		{"three digits", seriesTOML("", [3]string{"001-d.patch", "", ""}), "001-d.patch", `"001-d.patch": patch files are named NNNN-name.patch`},
		{"upper case", seriesTOML("", [3]string{"0001-D.patch", "", ""}), "0001-D.patch", `"0001-D.patch": patch files are named NNNN-name.patch`},
		{"listed twice", seriesTOML("", [3]string{"0001-d.patch", "", ""}, [3]string{"0001-d.patch", "", ""}), "0001-d.patch", `"0001-d.patch" is listed twice`},
		{"unknown key", "colour = \"red\"\n" + seriesTOML("", [3]string{"0001-d.patch", "", ""}), "0001-d.patch", `unknown key "colour"`},
		{"requires nothing", seriesTOML(`requires = [["a", "b"]]`, [3]string{"0001-d.patch", "", ""}), "0001-d.patch", `"a" names no patch file or provides tag`},
		{"no family", "name = \"s\"\n\n[[patch]]\nfile = \"0001-d.patch\"\nsha256 = \"\"\n", "0001-d.patch", "family: missing"},
		{"name differs", strings.Replace(seriesTOML("", [3]string{"0001-d.patch", "", ""}), `name = "s"`, `name = "t"`, 1), "0001-d.patch", `differs from the directory name "s"`},
	} {
		_, serr := Seal(seriesFS(c.toml, map[string]string{c.file: dispatchPatch}), "s", nowrite)
		sealed := strings.ReplaceAll(c.toml, `sha256 = ""`, `sha256 = "`+sum+`"`)
		_, lerr := LoadSeries(seriesFS(sealed, map[string]string{c.file: dispatchPatch}), "s", "s")
		if serr == nil || lerr == nil || !strings.Contains(serr.Error(), c.want) || !strings.Contains(lerr.Error(), c.want) {
			t.Errorf("%s: seal %v; load %v; want both %q", c.name, serr, lerr, c.want)
		}
	}
}

// TestSealFindsEachTable: the hash goes into the table whose file line
// names the patch, wherever else the name appears (a requires pair above
// the tables, a comment, a description), in a literal string too, and a
// table without a sha256 line gets one.
func TestSealFindsEachTable(t *testing.T) {
	toml := `# 0002-gate.patch needs 0001-dispatch.patch
name = "s"
family = "pcie"
description = "0001-dispatch.patch then 0002-gate.patch"
requires = [["0002-gate.patch", "0001-dispatch.patch"]]

[[patch]]
file = '0001-dispatch.patch'
sha256 = 'old'

[[ patch ]]
provides = ["x"]
file = "0002-gate.patch"
`
	var written string
	_, err := Seal(seriesFS(toml, map[string]string{"0001-dispatch.patch": dispatchPatch, "0002-gate.patch": gatePatch}), "s", func(_ string, data []byte) error {
		written = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(toml, `sha256 = 'old'`, `sha256 = "`+digest.SHA256Hex([]byte(dispatchPatch))+`"`, 1)
	want = strings.Replace(want, "file = \"0002-gate.patch\"\n", "file = \"0002-gate.patch\"\nsha256 = \""+digest.SHA256Hex([]byte(gatePatch))+"\"\n", 1)
	if written != want {
		t.Errorf("sealed:\n%s\nwant:\n%s", written, want)
	}
	if _, err := LoadSeries(seriesFS(written, map[string]string{"0001-dispatch.patch": dispatchPatch, "0002-gate.patch": gatePatch}), "s", "s"); err != nil {
		t.Errorf("the sealed series does not load: %v", err)
	}
}

// BenchmarkSeal seals a series of n patches, every hash to write: one
// read of each patch and one pass over series.toml, so the time per
// patch stays flat as n grows (docs/performance.md has the figures).
func BenchmarkSeal(b *testing.B) {
	for _, n := range []int{100, 1000, 4000} {
		b.Run(fmt.Sprintf("patches=%d", n), func(b *testing.B) {
			var entries [][3]string
			files := map[string]string{}
			for i := range n {
				name := fmt.Sprintf("%04d-p%d.patch", i, i)
				entries = append(entries, [3]string{name, "", ""})
				files[name] = dispatchPatch
			}
			fsys := seriesFS(seriesTOML("", entries...), files)
			b.ResetTimer()
			for range b.N {
				if _, err := Seal(fsys, "s", func(string, []byte) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/patch")
		})
	}
}
