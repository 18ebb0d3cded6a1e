// Package listspec is the one reader of the lists and sizes arpatch's
// flags take: comma-separated items (--impl, --modes, --branches,
// --dtype, --nccl-variants), whole counts (--concurrency's levels, a
// shape's tokens and hidden size) and byte sizes with ranges (--sizes,
// --pattern-bytes). It is strict: an empty item ("a,,b", "a,"), a
// fraction ("0.5", "1.5K"), zero, a sign, an exponent, a suffix other
// than K, M, G (each with an optional "i" and "B", any case) or B, a size
// above the caller's largest, and a range that runs backwards are each
// refused, saying which item and why. Errors name no flag: the caller
// puts the flag's name before them ("--sizes: ...").
package listspec

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Split reads a comma-separated list: each item with the spaces around it
// trimmed, none empty. An empty or blank s is no items (nil, nil): the
// caller says whether that is allowed. An empty item is refused, naming
// its place.
func Split(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
		if parts[i] == "" {
			return nil, fmt.Errorf("%q: item %d of %d is empty (a stray comma?)", s, i+1, len(parts))
		}
	}
	return parts, nil
}

// Whole reads a whole number in ASCII digits, 0 to 2^63-1, for a caller
// that checks the range itself; anything else is refused, naming s.
func Whole(s string) (int64, error) {
	n, ok := digits(s)
	if !ok || n > 1<<63-1 {
		return 0, fmt.Errorf("%q is not a whole number (digits only)", s)
	}
	return int64(n), nil
}

// Count reads a whole number from 1 to max in ASCII digits (a leading
// zero is taken: "08" is 8); anything else is refused, naming s.
func Count(s string, max int) (int, error) {
	n, ok := digits(s)
	if !ok || n == 0 || n > uint64(max) {
		return 0, fmt.Errorf("%q is not a whole number from 1 to %d", s, max)
	}
	return int(n), nil
}

// digits is s read as ASCII digits, false for anything else or a value
// past 2^64-1.
func digits(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var n uint64
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		hi, lo := bits.Mul64(n, 10)
		lo, carry := bits.Add64(lo, uint64(c-'0'), 0)
		if hi != 0 || carry != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// suffixes are the units a size may carry, binary: 1K = 1024 bytes.
var suffixes = []struct {
	name  string
	shift uint
}{
	{"KIB", 10}, {"MIB", 20}, {"GIB", 30},
	{"KB", 10}, {"MB", 20}, {"GB", 30},
	{"KI", 10}, {"MI", 20}, {"GI", 30},
	{"K", 10}, {"M", 20}, {"G", 30},
	{"B", 0},
}

// Bytes reads a size in bytes, 1 to max: whole ASCII digits with an
// optional unit K, M or G (binary: 1K = 1024 bytes; "KiB", "KB", "k" say
// the same) or B. "42K", "4096", "1MiB" are sizes; "0", "0.5", "1.5K",
// "-4K", "1e3", "12Q", "4 K" are not.
func Bytes(s string, max int) (int, error) {
	bad := func(why string) (int, error) {
		return 0, fmt.Errorf("%q is not a size in bytes: %s (e.g. 4096, 42K, 1M, up to %s)", s, why, format(max))
	}
	t := strings.TrimSpace(s)
	up := strings.ToUpper(t)
	shift := uint(0)
	for _, sf := range suffixes {
		if strings.HasSuffix(up, sf.name) {
			t, shift = t[:len(t)-len(sf.name)], sf.shift
			break
		}
	}
	n, ok := digits(t)
	switch {
	case t == "":
		return bad("no number")
	case strings.Count(t, ".") == 1 && strings.Trim(strings.Replace(t, ".", "", 1), "0123456789") == "":
		return bad("a whole number of bytes, no fraction")
	case !ok && strings.Trim(t, "0123456789") == "":
		return bad("too large")
	case !ok:
		return bad("digits and a unit K, M or G only")
	case n == 0:
		return bad("zero bytes")
	case n > uint64(max)>>shift:
		return bad("too large")
	}
	return int(n << shift), nil
}

// Sizes reads a list of sizes (Bytes) and ranges "A..B", which run from A
// doubling while at most B (4K..64K: 4K, 8K, 16K, 32K, 64K), each up to
// max, in the order given, a range expanded in place. A range whose end
// is below its start is refused; so is an empty list.
func Sizes(s string, max int) ([]int, error) {
	items, err := Split(s)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("no sizes in %q (e.g. 4K..1M or 4096,40K)", s)
	}
	var out []int
	for _, it := range items {
		lo, hi, isRange := strings.Cut(it, "..")
		if !isRange {
			n, err := Bytes(it, max)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
			continue
		}
		a, err := Bytes(lo, max)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", it, err)
		}
		b, err := Bytes(hi, max)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", it, err)
		}
		if a > b {
			return nil, fmt.Errorf("range %q runs backwards: write the smaller size first (%s..%s)", it, strings.TrimSpace(hi), strings.TrimSpace(lo))
		}
		for n := a; ; n *= 2 {
			out = append(out, n)
			if n > b/2 { // the next doubling is past b (and could overflow)
				break
			}
		}
	}
	return out, nil
}

// format is n as Sizes takes it back: "1T" is not taken, so 1<<40 is
// "1024G".
func format(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.Itoa(n>>30) + "G"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}
