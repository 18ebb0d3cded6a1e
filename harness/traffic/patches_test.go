package traffic_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/traffic"
	"github.com/arpatch/arpatch/harness/tune"
)

// Where the shipped patches carry the model's defaults: 0001's
// kPcieAutoPush1MaxBytes (auto's push1 bound) and 0002's
// PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES (the default
// SGLANG_PCIE_CUSTOM_AR_MAX_BYTES), each on an added line, as a whole
// number or a product of whole numbers ("64 * 1024").
var (
	push1Const = regexp.MustCompile(`^\+.*\bkPcieAutoPush1MaxBytes\s*=\s*([0-9']+)`)
	cutConst   = regexp.MustCompile(`^\+.*\bPCIE_CUSTOM_AR_DEFAULT_MAX_BYTES\s*=\s*([0-9_ *]+)`)
)

// patchConst returns the value of the first added line of the patch at
// path that re matches ("" for none), the product evaluated.
func patchConst(t *testing.T, path string, re *regexp.Regexp) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v := 1
		for _, f := range strings.Split(m[1], "*") {
			n, err := strconv.Atoi(strings.NewReplacer("'", "", "_", "", " ", "").Replace(f))
			if err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			v *= n
		}
		return strconv.Itoa(v)
	}
	return ""
}

// TestShippedDefaultsAreTheModels: every era of the pcie series ships the
// model's defaults for the reference host, and the tune's idea of 0002's
// built-in cut (tune.DefaultMaxBytes) is that default too.
func TestShippedDefaultsAreTheModels(t *testing.T) {
	p := traffic.Default()
	s := traffic.RefHost(p).Suggest(p, false)
	push1, cut := strconv.Itoa(s.Steps[0].Max), strconv.Itoa(s.MaxBytes)
	eras, err := filepath.Glob("../../patches/sglang/pcie-*")
	if err != nil || len(eras) == 0 {
		t.Fatalf("eras %v (%v), want every patches/sglang/pcie-* series", eras, err)
	}
	got := map[string][2]string{}
	landed := false
	for _, era := range eras {
		one, _ := filepath.Glob(filepath.Join(era, "0001-*.patch"))
		two, _ := filepath.Glob(filepath.Join(era, "0002-*.patch"))
		if len(one) != 1 || len(two) != 1 {
			t.Fatalf("%s: 0001 %v, 0002 %v", era, one, two)
		}
		v := [2]string{patchConst(t, one[0], push1Const), patchConst(t, two[0], cutConst)}
		got[filepath.Base(era)] = v
		landed = landed || v[0] != ""
	}
	if !landed {
		t.Fatalf("no era's 0001 defines kPcieAutoPush1MaxBytes; the model wants kPcieAutoPush1MaxBytes = %s in 0001 and PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES = %s in 0002 (traffic.RefHost(p).Suggest, docs/pcie-dispatch.md)", push1, cut)
	}
	if strconv.Itoa(tune.AutoPush1MaxBytes) != push1 {
		t.Errorf("tune.AutoPush1MaxBytes is %d; 0001's auto push1 bound is the model's, %s", tune.AutoPush1MaxBytes, push1)
	}
	if strconv.Itoa(tune.DefaultMaxBytes) != cut {
		t.Errorf("tune.DefaultMaxBytes is %d; 0002's default is the model's cut, %s", tune.DefaultMaxBytes, cut)
	}
	for era, v := range got {
		if v[0] != push1 || v[1] != cut {
			t.Errorf("%s ships kPcieAutoPush1MaxBytes = %q and PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES = %q; the model's are %s and %s (docs/pcie-dispatch.md, \"The shipped defaults\")", era, v[0], v[1], push1, cut)
		}
	}
}

// TestPatchConst: the reader of the patches' constants, on the forms they
// may take.
func TestPatchConst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.patch")
	for _, c := range []struct {
		text string
		re   *regexp.Regexp
		want string
	}{
		{"+static constexpr size_t kPcieAutoPush1MaxBytes = 5824;\n", push1Const, "5824"},
		{"+constexpr int64_t kPcieAutoPush1MaxBytes = 3'342'336;\n", push1Const, "3342336"},
		{" static constexpr size_t kPcieAutoPush1MaxBytes = 5824;\n", push1Const, ""}, // context, not added
		{"+PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES = 64 * 1024\n", cutConst, "65536"},
		{"+PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES = 3_342_336\n", cutConst, "3342336"},
		{"-PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES = 64 * 1024\n+PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES = 2048\n", cutConst, "2048"},
	} {
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := patchConst(t, path, c.re); got != c.want {
			t.Errorf("%q: %q, want %q", c.text, got, c.want)
		}
	}
	// Today's 0002 carries the old default, 64 KiB.
	if got := patchConst(t, "../../patches/sglang/pcie-2026-08/0002-pcie-gate-bypass.patch", cutConst); got == "" {
		t.Errorf("pcie-2026-08's 0002: no PCIE_CUSTOM_AR_DEFAULT_MAX_BYTES on an added line")
	}
}
