package patches

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/arpatch/arpatch/internal/digest"
)

const (
	commitA = "84118acf50b3a4c74e85e9ff9033792552de1a76"
	commitB = "8905cbd42f4a27dbecad6487cd3904278756fef8"
	commitC = "cccccccccccccccccccccccccccccccccccccccc"
)

// twoEras builds a catalog of two "pcie" series that edit the same line in
// two shapes of one file, like the era A and era B series.
func twoEras(t *testing.T) *Catalog {
	t.Helper()
	mk := func(name, tested, old string) (*Series, fstest.MapFS) {
		p := "Description: d\nAuthor: t\nUpstream-Status: Pending\nApplies-To: x\n\n--- a/k.cuh\n+++ b/k.cuh\n@@ -2,3 +2,3 @@\n {\n-" + old + "\n+launch();\n }\n"
		toml := "name = \"" + name + "\"\nfamily = \"pcie\"\ntested_on = [\"" + tested + "\"]\n\n[[patch]]\nfile = \"0001-k.patch\"\nsha256 = \"" + digest.SHA256Hex([]byte(p)) + "\"\n"
		fsys := fstest.MapFS{name + "/series.toml": {Data: []byte(toml)}, name + "/0001-k.patch": {Data: []byte(p)}}
		s, err := LoadSeries(fsys, name, "test/"+name)
		if err != nil {
			t.Fatal(err)
		}
		return s, fsys
	}
	a, _ := mk("era-a", commitA, "if (full_nvlink_) launch();")
	b, _ := mk("era-b", commitB, "if (full_nvlink_ && !musa) launch();")
	return &Catalog{Series: []*Series{a, b}}
}

func TestResolve(t *testing.T) {
	cat := twoEras(t)
	treeA := memTree{"k.cuh": "//k\n{\nif (full_nvlink_) launch();\n}\n"}
	treeB := memTree{"k.cuh": "//k\n{\nif (full_nvlink_ && !musa) launch();\n}\n"}

	c, err := cat.Resolve("pcie", "", commitA, treeA, nil)
	if err != nil || c.Series.Name != "era-a" || c.Reason != "tested on 84118acf50b3" {
		t.Errorf("tested commit A: %v %v", c, err)
	}
	// Commit C is untested; only era B applies to its tree.
	c, err = cat.Resolve("pcie", "", commitC, treeB, nil)
	if err != nil || c.Series.Name != "era-b" || !strings.Contains(c.Reason, "which it was not tested on (exact)") {
		t.Errorf("untested commit with B's shape: %v %v", c, err)
	}
	// Forced: taken as is, even when it will not apply.
	c, err = cat.Resolve("pcie", "era-a", commitB, treeB, nil)
	if err != nil || c.Series.Name != "era-a" || c.Reason != "forced by --series" {
		t.Errorf("forced: %v %v", c, err)
	}
	// No series fits: the error lists the known series and the remedy.
	_, err = cat.Resolve("pcie", "", commitC, memTree{"k.cuh": "something else\n"}, nil)
	var ne *NoSeriesError
	if !errors.As(err, &ne) {
		t.Fatalf("no fit: err = %v, want NoSeriesError", err)
	}
	for _, want := range []string{"no \"pcie\" series fits commit " + commitC, "era-a", "era-b", "tested on 84118acf50b3", "arpatch patches check", "--series"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no-fit message lacks %q:\n%s", want, err)
		}
	}
	if _, err := cat.Resolve("pcie", "nosuch", commitA, treeA, nil); err == nil || !strings.Contains(err.Error(), "known series: era-a, era-b") {
		t.Errorf("unknown forced series: %v", err)
	}
	if _, err := cat.Resolve("other", "", commitA, treeA, nil); err == nil || !strings.Contains(err.Error(), "no series has that name or family") {
		t.Errorf("unknown family: %v", err)
	}
}

func TestResolveTwoTestedOnOneCommit(t *testing.T) {
	cat := twoEras(t)
	cat.Series[1].TestedOn = append(cat.Series[1].TestedOn, commitA)
	_, err := cat.Resolve("pcie", "", commitA, memTree{"k.cuh": "//k\n{\nif (full_nvlink_) launch();\n}\n"}, nil)
	var ae *AmbiguousError
	if !errors.As(err, &ae) || !ae.Tested || !strings.Contains(err.Error(), "all list commit 84118acf50b3 in tested_on") {
		t.Errorf("err = %v, want AmbiguousError", err)
	}
	// --series with a family name chooses inside that family.
	c, err := cat.Resolve("other", "pcie", commitB, memTree{"k.cuh": "//k\n{\nif (full_nvlink_ && !musa) launch();\n}\n"}, nil)
	if err != nil || c.Series.Name != "era-b" {
		t.Errorf("family via --series: %v %v", c, err)
	}
}

func TestResolveAmbiguousIsRefused(t *testing.T) {
	cat := twoEras(t)
	// A tree where each series' line appears: both apply, neither tested.
	tree := memTree{"k.cuh": "//k\n{\nif (full_nvlink_) launch();\n}\n{\nif (full_nvlink_ && !musa) launch();\n}\n"}
	_, err := cat.Resolve("pcie", "", commitC, tree, nil)
	var ae *AmbiguousError
	if !errors.As(err, &ae) || len(ae.Fits) != 2 || !strings.Contains(err.Error(), "pick one with --series") {
		t.Errorf("err = %v, want AmbiguousError for both", err)
	}
}
