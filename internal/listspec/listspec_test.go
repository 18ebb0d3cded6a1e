package listspec

import (
	"slices"
	"strings"
	"testing"
)

const max = 1 << 40

func TestBytes(t *testing.T) {
	for in, want := range map[string]int{
		"4096": 4096, "42K": 42 << 10, "42k": 42 << 10, "40KiB": 40 << 10, "40kb": 40 << 10, "1M": 1 << 20, "1MiB": 1 << 20,
		"2G": 2 << 30, "512B": 512, " 16 ": 16, "0040960": 40960, "1024G": max, "1Ki": 1024,
	} {
		if got, err := Bytes(in, max); err != nil || got != want {
			t.Errorf("Bytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"": "no number", "K": "no number", "0": "zero bytes", "0K": "zero bytes", "0.5": "no fraction", "1.5K": "no fraction",
		"-4K": "digits and a unit", "+4": "digits and a unit", "1e3": "digits and a unit", "12Q": "digits and a unit",
		"4 K": "digits and a unit", "0x10": "digits and a unit", "NaN": "digits and a unit", "Inf": "digits and a unit",
		"1T": "digits and a unit", "1025G": "too large", "99999999999999999999": "too large", "18446744073709551616K": "too large",
		"１６": "digits and a unit", "4KK": "digits and a unit", "4BK": "digits and a unit",
	} {
		if got, err := Bytes(in, max); err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "e.g. 4096, 42K, 1M, up to 1024G") {
			t.Errorf("Bytes(%q) = %d, %v; want a refusal saying %q", in, got, err, why)
		}
	}
	if _, err := Bytes("2G", 1<<30); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("2G against a 1G limit: %v", err)
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string][]int{
		"4K..64K, 42000, 1M, 4K": {4096, 8192, 16384, 32768, 65536, 42000, 1 << 20, 4096},
		"3K..10K":                {3072, 6144},
		"1M..1M":                 {1 << 20},
		"512G..1024G":            {512 << 30, 1024 << 30},
	} {
		if got, err := Sizes(in, max); err != nil || !slices.Equal(got, want) {
			t.Errorf("Sizes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"":            "no sizes",
		" ":           "no sizes",
		"0.5..1M":     `range "0.5..1M": "0.5" is not a size in bytes: a whole number of bytes, no fraction`,
		"0..1M":       "zero bytes",
		"1M..4K":      `range "1M..4K" runs backwards: write the smaller size first (4K..1M)`,
		"4K,,8K":      "item 2 of 3 is empty",
		"4K,":         "item 2 of 2 is empty",
		",4K":         "item 1 of 2 is empty",
		"4K..":        "no number",
		"..4K":        "no number",
		"4K..8K..16K": "digits and a unit",
		"-4K..4K":     "digits and a unit",
		"4K..2048G":   "too large",
		"4K;8K":       "digits and a unit",
	} {
		if got, err := Sizes(in, max); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Sizes(%q) = %v, %v; want a refusal saying %q", in, got, err, why)
		}
	}
}

func TestSplitAndCount(t *testing.T) {
	if got, err := Split(" eager, graph "); err != nil || !slices.Equal(got, []string{"eager", "graph"}) {
		t.Errorf("Split: %v %v", got, err)
	}
	if got, err := Split("  "); err != nil || got != nil {
		t.Errorf("Split of blanks: %v %v, want no items", got, err)
	}
	for _, in := range []string{"a,,b", "a,", ",a", "a, ,b"} {
		if _, err := Split(in); err == nil || !strings.Contains(err.Error(), "is empty") {
			t.Errorf("Split(%q) = %v, want the empty item refused", in, err)
		}
	}
	if n, err := Count("08", 10); err != nil || n != 8 {
		t.Errorf("Count(08) = %d, %v", n, err)
	}
	for _, in := range []string{"0", "11", "-1", "+1", "1.0", "", " 1", "1e1", "99999999999999999999"} {
		if _, err := Count(in, 10); err == nil || !strings.Contains(err.Error(), "is not a whole number from 1 to 10") {
			t.Errorf("Count(%q) = %v, want a refusal", in, err)
		}
	}
}

// FuzzSizes: whatever the input, Sizes ends (the fuzzer's deadline
// catches a loop such as "0.5..1M" made), and what it accepts is a list
// of sizes from 1 to its limit, each range expanded by doubling; what it
// refuses it says why, quoting the input's item.
func FuzzSizes(f *testing.F) {
	for _, s := range []string{"4K..64K, 42000, 1M", "0.5..1M", "0..1M", "1M..4K", "4K,,8K", "1e3", "NaN..Inf", "1G..1024G", "18446744073709551615", "4k..4M", "16..8M"} {
		f.Add(s)
	}
	const limit = 1 << 30
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Sizes(s, limit)
		if err != nil {
			if got != nil {
				t.Errorf("Sizes(%q) = %v with error %v", s, got, err)
			}
			return
		}
		if len(got) == 0 {
			t.Fatalf("Sizes(%q) accepted no sizes", s)
		}
		for _, n := range got {
			if n < 1 || n > limit {
				t.Errorf("Sizes(%q) gave %d, outside 1..%d", s, n, limit)
			}
		}
		if len(got) > 64*strings.Count(s, ",")+64 {
			t.Errorf("Sizes(%q) gave %d sizes: more than a doubling range can", s, len(got))
		}
		// Each item alone gives its own part, in order.
		items, _ := Split(s)
		var again []int
		for _, it := range items {
			part, err := Sizes(it, limit)
			if err != nil {
				t.Fatalf("Sizes(%q) took %q, alone it is refused: %v", s, it, err)
			}
			again = append(again, part...)
		}
		if !slices.Equal(again, got) {
			t.Errorf("Sizes(%q) = %v, item by item %v", s, got, again)
		}
	})
}
