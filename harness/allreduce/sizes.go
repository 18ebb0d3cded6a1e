// Package allreduce drives arpatch's allreduce micro-benchmark: it starts
// bench.py (embedded) on N ranks with torchrun, guards the run with a
// timeout, reads the per-case results, records which transport NCCL chose,
// and renders the size x implementation table with the predicted cost of an
// EAGLE-3 verify pass.
//
// Facts it rests on: sgl-kernel's CustomAllreduce::allreduce picks 1-stage
// or 2-stage by world size, full_nvlink_ and bytes, and
// SGLANG_CUSTOM_ALLREDUCE_ALGO forces one (Upstream:
// sgl-kernel/csrc/allreduce/custom_all_reduce.cuh@8905cbd42f4a
// (CustomAllreduce::allreduce), the same bytes under
// python/sglang/kernels/aot/ at c32c4ef79cf5 and 0bda0b168ad5); an EAGLE-3
// verify pass in the published PCIe account did VerifyCount allreduces of
// VerifyShape (verify.go); nccl-tests' -G flag times CUDA-graph-captured
// loops.
package allreduce

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/arpatch/arpatch/internal/listspec"
)

// MaxBytes is the largest size ParseBytes and ParseShape take: 1 TiB
// where int has 64 bits, far above any allreduce buffer; 1 GiB where it
// has 32 (linux/386, arm), so that a size, and a size range's last
// doubling, fit in an int there.
const MaxBytes = min(1<<40, 1<<(bits.UintSize-2))

// ParseBytes reads "42K", "40KiB", "1M", "4096" as a byte count (K, M
// and G are binary: 1K = 1024 bytes), by listspec.Bytes: a whole number
// from 1 to MaxBytes, no fraction, sign or other unit; the error quotes s
// and says why.
func ParseBytes(s string) (int, error) { return listspec.Bytes(s, MaxBytes) }

// ParseSizes reads a size list (listspec.Sizes): comma-separated sizes
// and ranges "A..B", which run from A doubling up to B. Each size is
// rounded up to a multiple of 16 bytes (custom allreduce needs it) and
// the result is sorted and unique. Empty items, fractions, zero,
// backward ranges and sizes above MaxBytes are refused.
func ParseSizes(spec string) ([]int, error) {
	sizes, err := listspec.Sizes(spec, MaxBytes)
	if err != nil {
		return nil, err
	}
	for i, n := range sizes {
		sizes[i] = (n + 15) / 16 * 16
	}
	slices.Sort(sizes)
	return slices.Compact(sizes), nil
}

// Shape is an allreduce of tokens x hidden elements of elemBytes each.
type Shape struct {
	Tokens, Hidden, ElemBytes int
}

// ParseShape reads TOKENSxHIDDEN (as Shape.Spec prints it) in bf16. It
// refuses a malformed shape, and one of more than MaxBytes (tested
// without overflowing an int), naming s.
func ParseShape(s string) (Shape, error) {
	a, b, ok := strings.Cut(strings.ToLower(s), "x")
	t, err1 := listspec.Count(a, math.MaxInt)
	h, err2 := listspec.Count(b, math.MaxInt)
	if !ok || err1 != nil || err2 != nil {
		return Shape{}, fmt.Errorf("%q: want TOKENSxHIDDEN, e.g. %s", s, VerifyShape.Spec())
	}
	shape := Shape{Tokens: t, Hidden: h, ElemBytes: BF16Bytes}
	if t > MaxBytes/shape.ElemBytes/h {
		return Shape{}, fmt.Errorf("%q is more than %s bytes of bf16: want TOKENSxHIDDEN of a verify pass, e.g. %s", s, FormatBytes(MaxBytes), VerifyShape.Spec())
	}
	return shape, nil
}

// Bytes is tokens x hidden x element size.
func (s Shape) Bytes() int { return s.Tokens * s.Hidden * s.ElemBytes }

func (s Shape) String() string {
	return fmt.Sprintf("%d tokens x hidden %d x bf16 = %s", s.Tokens, s.Hidden, FormatBytes(s.Bytes()))
}

// FormatBytes prints 40960 as "40K", 1048576 as "1M", 42000 as "41.0K",
// MaxBytes as "1T" (or "1G" where int has 32 bits).
func FormatBytes(n int) string {
	switch {
	case int64(n) >= 1<<40 && int64(n)%(1<<40) == 0: // int64: 1<<40 overflows a 32-bit int
		return fmt.Sprintf("%dT", int64(n)>>40)
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// ParseSizesCap is ParseSizes for a list that may also hold the word
// "cap": each implementation's own largest size (Options.Cap). A list of
// "cap" alone has no other size.
func ParseSizesCap(spec string) (sizes []int, capped bool, err error) {
	items, err := listspec.Split(spec)
	if err != nil {
		return nil, false, err
	}
	var rest []string
	for _, it := range items {
		if strings.EqualFold(it, "cap") {
			capped = true
			continue
		}
		rest = append(rest, it)
	}
	if capped && len(rest) == 0 {
		return nil, true, nil
	}
	sizes, err = ParseSizes(strings.Join(rest, ","))
	return sizes, capped, err
}
