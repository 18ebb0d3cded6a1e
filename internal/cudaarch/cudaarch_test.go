package cudaarch

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse([]string{"120a,sm_90a", " 120a ", "sm_100"})
	if err != nil || !reflect.DeepEqual(got, []Arch{"100", "120a", "90a"}) {
		t.Errorf("Parse = %v, %v", got, err)
	}
	if _, err := Parse([]string{"120x"}); err == nil || !strings.Contains(err.Error(), `unknown CUDA arch "120x"; use names like 120a`) || !strings.Contains(err.Error(), "known: 75, 80, 86, 87, 89, 90, 90a, 100, 100a, 100f, 101a, 103a, 110a, 120, 120a, 120f, 121a") {
		t.Errorf("bad arch: %v", err)
	}
	if _, err := Parse([]string{"sm_80a"}); err == nil || !strings.Contains(err.Error(), `unknown CUDA arch "sm_80a"`) {
		t.Errorf("80a (no such variant): %v", err)
	}
	for _, l := range []string{"120a,,90a", "120a,", ",90a"} {
		if _, err := Parse([]string{l}); err == nil || !strings.Contains(err.Error(), "has an empty arch name (a doubled, leading or trailing comma)") {
			t.Errorf("%q: %v", l, err)
		}
	}
	if _, err := Parse([]string{"120a,,90a"}); err == nil || !strings.HasSuffix(err.Error(), "; write 120a,90a") {
		t.Errorf("120a,,90a: %v, want the list without the empty name", err)
	}
	if _, err := Parse([]string{" , "}); err == nil || err.Error() != "no CUDA arch given; pass --arch, e.g. --arch 120a" {
		t.Errorf("empty arch list: %v", err)
	}
}

func TestSpellings(t *testing.T) {
	for a, want := range map[Arch][4]string{
		"120a": {"sm_120a", "-gencode=arch=compute_120a,code=sm_120a", "12.0a", "120"},
		"90a":  {"sm_90a", "-gencode=arch=compute_90a,code=sm_90a", "9.0a", "90"},
		"80":   {"sm_80", "-gencode=arch=compute_80,code=sm_80", "8.0", "80"},
		"100f": {"sm_100f", "-gencode=arch=compute_100f,code=sm_100f", "10.0f", "100"},
	} {
		if got := [4]string{a.SM(), a.Gencode(), a.Torch(), a.CC()}; got != want {
			t.Errorf("%s: %q, want %q", a, got, want)
		}
	}
	if a := FromGencode("arch=compute_120a,code=[sm_120a,compute_120a]"); a != "120a" {
		t.Errorf("FromGencode = %q", a)
	}
	if a := FromGencode("-O3"); a != "" {
		t.Errorf("FromGencode(-O3) = %q", a)
	}
}

// TestNVCC pins the minimums from NVIDIA's release notes that the build's
// toolchain check and doctor print.
func TestNVCC(t *testing.T) {
	for _, c := range []struct {
		a            Arch
		major, minor int
		ok           bool
	}{
		{"120a", 12, 8, true}, {"120a", 12, 4, false}, {"120a", 13, 0, true}, {"121a", 12, 8, false},
		{"90a", 12, 0, true}, {"90a", 11, 8, false}, {"110a", 12, 9, false}, {"75", 10, 0, true}, {"121x", 99, 0, false},
	} {
		if got := c.a.NVCCSupports(c.major, c.minor); got != c.ok {
			t.Errorf("%s with nvcc %d.%d: %v, want %v", c.a, c.major, c.minor, got, c.ok)
		}
	}
	if major, minor, ok := Arch("120a").MinNVCC(); major != 12 || minor != 8 || !ok {
		t.Errorf("MinNVCC(120a) = %d.%d %v", major, minor, ok)
	}
}

func TestForComputeCap(t *testing.T) {
	for cc, want := range map[string]Arch{"12.0": "120a", "9.0": "90a", "8.0": "80", "8.6": "86", "10.0": "100a"} {
		if a, ok := ForComputeCap(cc); a != want || !ok {
			t.Errorf("ForComputeCap(%s) = %q %v, want %q", cc, a, ok, want)
		}
	}
	if a, ok := ForComputeCap("6.1"); ok {
		t.Errorf("ForComputeCap(6.1) = %q, true", a)
	}
}

func TestDeviceDefines(t *testing.T) {
	for _, c := range []struct {
		a    Arch
		want string
	}{
		{"80", "__CUDA_ARCH__=800"},
		{"90a", "__CUDA_ARCH__=900 __CUDA_ARCH_FEAT_SM90_ALL=1 __CUDA_ARCH_SPECIFIC__=900 __CUDA_ARCH_FAMILY_SPECIFIC__=900"},
		{"120", "__CUDA_ARCH__=1200"},
		{"120a", "__CUDA_ARCH__=1200 __CUDA_ARCH_FEAT_SM120_ALL=1 __CUDA_ARCH_SPECIFIC__=1200 __CUDA_ARCH_FAMILY_SPECIFIC__=1200"},
		{"100f", "__CUDA_ARCH__=1000 __CUDA_ARCH_FAMILY_SPECIFIC__=1000"},
		{"121a", "__CUDA_ARCH__=1210 __CUDA_ARCH_FEAT_SM121_ALL=1 __CUDA_ARCH_SPECIFIC__=1210 __CUDA_ARCH_FAMILY_SPECIFIC__=1210"},
	} {
		if got := strings.Join(c.a.DeviceDefines(), " "); got != c.want {
			t.Errorf("%s: DeviceDefines = %q, want %q", c.a, got, c.want)
		}
	}
}
