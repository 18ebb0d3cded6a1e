package tune_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/arpatch/arpatch/harness/tune"
)

// forcedValues are SGLANG_FORCE_CUSTOM_AR_PCIE values as a user or a
// recipe may write them.
var forcedValues = []string{"1", "true", "TRUE", "True", "tRuE", "yes", "YES", "Yes", "on", "ON", "On", "oN",
	" 1", "1 ", "\t1\n", " on ", "\u00a0on", "on\u3000", "\x1con\x1f", "\u2028yes", "\u0085true",
	"0", "false", "no", "off", "OFF", "", " ", "2", "01", "1.0", "+1", "-1", "y", "t", "enabled", "o n", "truee", "１", "ｏｎ", "ＴＲＵＥ", "İ"}

// TestForcedIsTheSeries: arpatch reads SGLANG_FORCE_CUSTOM_AR_PCIE
// (tune.Forced) as every era's 0002 does (pcie_custom_ar_forced, run
// under python3): the same verdict on every value above and unset, and
// the same whitespace stripped around a value, over every code point.
func TestForcedIsTheSeries(t *testing.T) {
	ss, py, _ := shippedSeries(t)
	ctx := context.Background()
	var vals []*string
	for i := range forcedValues {
		vals = append(vals, &forcedValues[i])
	}
	scanned := map[string]bool{}
	for _, s := range ss {
		got, err := s.Forced(ctx, py, append(vals, nil))
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range forcedValues {
			if tune.Forced(v) != got[i] {
				t.Errorf("%s: %s=%q: the series reads it as %v, arpatch as %v", s.Name, tune.EnvForce, v, got[i], tune.Forced(v))
			}
		}
		if got[len(forcedValues)] || tune.Forced("") {
			t.Errorf("%s: unset reads as on", s.Name)
		}
		// The whitespace scan runs once per distinct function.
		i := strings.Index(s.Utils, "def pcie_custom_ar_forced")
		fn := s.Utils[i : i+strings.Index(s.Utils[i:], "\n\n")]
		if scanned[fn] {
			continue
		}
		scanned[fn] = true
		hits, err := s.ForcedAround(ctx, py, []string{"on"})
		if err != nil {
			t.Fatal(err)
		}
		var want []rune
		for r := rune(0); r <= utf8.MaxRune; r++ {
			if r >= 0xd800 && r <= 0xdfff {
				continue // no UTF-8 string holds a surrogate
			}
			if c := string(r); tune.Forced(c + "on" + c) {
				want = append(want, r)
			}
		}
		py := slices.DeleteFunc(hits[0], func(r rune) bool { return r >= 0xd800 && r <= 0xdfff })
		if !slices.Equal(py, want) {
			t.Errorf("%s: the series strips %s around a value, arpatch %s", s.Name, runes(py), runes(want))
		}
		if len(want) < 20 {
			t.Errorf("only %d code points stripped: the scan tests nothing", len(want))
		}
	}
}

func runes(rs []rune) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "U+%04X ", r)
	}
	return b.String()
}
