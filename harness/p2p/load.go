package p2p

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Load reads a report `arpatch bench p2p --json` wrote and trusts nothing
// in it that its records do not give: it refuses another schema; a
// measured value (run.results[i]: every sample, per-rank time, checked
// byte count) that is missing, zero, negative, NaN or infinite; a record
// that moved bytes and checked fewer (checks missing or empty, a direction
// with no check, checked_bytes below what its samples moved) or a host
// record without the CPU's check (cpu_check); a result
// of no known test, or naming a rank the report did not measure; and a
// report whose summary (pairs, host links, patterns, corrupt, findings,
// unmeasured, verdict: what doctor and tune read) is not what NewReport
// derives from its own records and options, naming the first field that
// differs. Each error names path and the field, and says how to measure
// again. A file that cannot be read is the *os.PathError, naming path.
func Load(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	const again = "measure again with `arpatch bench p2p --json NEW.json`"
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
			if at := b[max(0, int(se.Offset)-1):]; bytes.HasPrefix(at, []byte("NaN")) || bytes.HasPrefix(at, []byte("Infinity")) || bytes.HasPrefix(at, []byte("-Infinity")) {
				return nil, fmt.Errorf("%s:%d: a measured value is NaN or Infinity, which is no measurement (and no JSON number); %s", path, line, again)
			}
			return nil, fmt.Errorf("%s:%d: not a bench p2p report: %w", path, line, err)
		}
		return nil, fmt.Errorf("%s: not a bench p2p report: %w", path, err)
	}
	if rep.Schema != Schema {
		return nil, fmt.Errorf("%s: schema %q, want %q (write one with `arpatch bench p2p --json NEW.json`)", path, rep.Schema, Schema)
	}
	if err := rep.checkRecords(); err != nil {
		return nil, fmt.Errorf("%s: %w; %s", path, err, again)
	}
	d := rep.derived()
	if field, in, want := summaryDiff(&rep, d); field != "" {
		return nil, fmt.Errorf("%s: %s is %s in the file, but its records give %s: the summary was edited or written by another arpatch, and doctor and tune read it; %s",
			path, field, in, want, again)
	}
	return &rep, nil
}

// derived is the report NewReport makes of rep's own records and options.
func (rep *Report) derived() *Report {
	o := Options{GPUs: rep.Host.GPUs, Topology: rep.Host.Topology, Sizes: rep.Options.Sizes, PatternBytes: rep.Options.PatternBytes, Reps: rep.Options.Reps}
	return NewReport(o, rep.Run, rep.ArpatchVersion)
}

// checkRecords refuses records no measurement makes (Load).
func (rep *Report) checkRecords() error {
	if rep.Run == nil {
		return errors.New("run is missing: the records every figure comes from")
	}
	n := len(rep.Host.GPUs)
	if n == 0 {
		return errors.New("host.gpus is empty: which GPUs were measured is unknown")
	}
	if rep.Options.Reps < 1 {
		return fmt.Errorf("options.reps is %d, want 1 or more", rep.Options.Reps)
	}
	for i, s := range append([]int{rep.Options.PatternBytes}, rep.Options.Sizes...) {
		if s <= 0 || s%16 != 0 {
			f := "options.pattern_bytes"
			if i > 0 {
				f = fmt.Sprintf("options.sizes[%d]", i-1)
			}
			return fmt.Errorf("%s is %d, want a positive multiple of 16 bytes", f, s)
		}
	}
	for i, r := range rep.Run.Results {
		if err := checkResult(fmt.Sprintf("run.results[%d]", i), r, n); err != nil {
			return err
		}
	}
	return nil
}

// checkResult refuses a record (field at) that no run on n GPUs writes.
func checkResult(at string, r Result, n int) error {
	rank := func(field string, r int) error {
		if r < 0 || r >= n {
			return fmt.Errorf("%s is %d, not a rank of the %d GPUs measured", field, r, n)
		}
		return nil
	}
	ops, ok := testOps[r.Test]
	if !ok {
		return fmt.Errorf("%s.test is %q, not a test of bench p2p (%s)", at, r.Test, strings.Join(slices.Sorted(maps.Keys(testOps)), ", "))
	}
	if !slices.Contains(ops, r.Op) && r.Test != TestIPC {
		return fmt.Errorf("%s.op is %q, not an op of test %s (%s)", at, r.Op, r.Test, strings.Join(ops, ", "))
	}
	if err := rank(at+".rank", r.Rank); err != nil && r.Test != TestPattern {
		return err
	}
	if r.Test == TestPair || r.Test == TestIPC || r.Test == TestLatency && r.Op != OpHostRead {
		if err := rank(at+".peer", r.Peer); err != nil {
			return err
		}
	}
	for j, c := range r.Checks {
		if c.CheckedBytes < 0 || c.BadWords < 0 {
			return fmt.Errorf("%s.checks[%d]: checked_bytes %d, bad_words %d: counts are not negative", at, j, c.CheckedBytes, c.BadWords)
		}
	}
	if r.Error != "" {
		return nil // nothing measured: its error is the finding
	}
	switch r.Test {
	case TestPair, TestHost:
		if r.Bytes <= 0 {
			return fmt.Errorf("%s.bytes is %d, want the transfer's size", at, r.Bytes)
		}
		if err := positive(at+".samples_gbps", r.SamplesGBps, "GB/s"); err != nil {
			return err
		}
		if r.Test == TestHost && r.CPUCheck == "" {
			return fmt.Errorf("%s.cpu_check is missing: the CPU's own look at the pinned host memory the GPU moved, \"ok\" or what it found", at)
		}
		peer := r.Peer
		if r.Test == TestHost {
			peer = HostPeer
		}
		return checkedAll(at, r, [][2]int{{r.Rank, peer}}, int64(r.Bytes)*int64(len(r.SamplesGBps)))
	case TestLatency:
		if err := positive(at+".samples_us", r.SamplesUS, "µs"); err != nil {
			return err
		}
		if r.Op == OpFlagRTT {
			return nil // flags only: no data to check
		}
		peer := r.Peer
		if r.Op == OpHostRead {
			peer = HostPeer
		}
		return checkedAll(at, r, [][2]int{{r.Rank, peer}}, 4*int64(len(r.SamplesUS)))
	case TestPattern:
		return checkPattern(at, r, rank)
	}
	return nil
}

// checkedAll refuses a record (field at) whose checks do not cover every
// direction of dirs (rank's kernel, peer's memory) with at least least
// bytes each: a record that moved bytes and checked none would say every
// byte checked. least is what the record's own fields show moved: its
// size once per timed sample (pair, host, pattern read and write), or a
// 4-byte load per sample (the dependent loads of a latency record; the
// probe checks where each chain of them ended).
func checkedAll(at string, r Result, dirs [][2]int, least int64) error {
	if len(r.Checks) == 0 {
		return fmt.Errorf("%s.checks is missing or empty: the record moved bytes and checked none, so nothing says they arrived intact", at)
	}
	for _, d := range dirs {
		j := slices.IndexFunc(r.Checks, func(c Check) bool { return c.Rank == d[0] && c.Peer == d[1] })
		if j < 0 {
			return fmt.Errorf("%s.checks has no check of rank %d's transfer with peer %d: those bytes were not checked", at, d[0], d[1])
		}
		if c := r.Checks[j]; c.CheckedBytes < least {
			return fmt.Errorf("%s.checks[%d].checked_bytes is %d, fewer than the %d bytes the record moved: bytes went unchecked", at, j, c.CheckedBytes, least)
		}
	}
	return nil
}

// checkPattern refuses a pattern record without every rank's times.
func checkPattern(at string, r Result, rank func(string, int) error) error {
	if len(r.Ranks) < 2 {
		return fmt.Errorf("%s.ranks is %v: a pattern spans two ranks or more", at, r.Ranks)
	}
	if r.Op != OpReadLatency && r.Bytes <= 0 {
		return fmt.Errorf("%s.bytes is %d, want the bytes per peer", at, r.Bytes)
	}
	reps := -1
	for _, x := range r.Ranks {
		if err := rank(at+".ranks", x); err != nil {
			return err
		}
		f := fmt.Sprintf("%s.per_rank_us[%q]", at, strconv.Itoa(x))
		us := r.PerRankUS[strconv.Itoa(x)]
		if err := positive(f, us, "µs"); err != nil {
			return err
		}
		if reps >= 0 && len(us) != reps {
			return fmt.Errorf("%s has %d reps, rank %d's %d: every rank times every rep", f, len(us), r.Ranks[0], reps)
		}
		reps = len(us)
	}
	var dirs [][2]int
	for _, a := range r.Ranks {
		for _, b := range r.Ranks {
			if a != b {
				dirs = append(dirs, [2]int{a, b})
			}
		}
	}
	least := int64(r.Bytes) * int64(reps)
	if r.Op == OpReadLatency {
		least = 4 * int64(reps)
	}
	return checkedAll(at, r, dirs, least)
}

// testOps are the ops of each test (Result.Test).
var testOps = map[string][]string{
	TestHost:    {OpLoad, OpStore},
	TestPair:    {OpRead, OpWrite},
	TestLatency: {OpFlagRTT, OpRead, OpHostRead},
	TestPattern: {OpRead, OpWrite, OpReadLatency},
	TestIPC:     nil,
}

// positive refuses an empty list of measured values, or one that is not a
// positive finite number.
func positive(field string, xs []float64, unit string) error {
	if len(xs) == 0 {
		return fmt.Errorf("%s is missing: a case that ran measured something", field)
	}
	for i, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 {
			return fmt.Errorf("%s[%d] is %v %s: a measured value is a positive finite number", field, i, x, unit)
		}
	}
	return nil
}

// summaryDiff is the first field of rep's summary that differs from d's,
// with both values as JSON; "" when none.
func summaryDiff(rep, d *Report) (field, in, want string) {
	for _, f := range []struct {
		name   string
		in, to any
	}{
		{"pairs", rep.Pairs, d.Pairs}, {"host_links", rep.HostLinks, d.HostLinks}, {"patterns", rep.Patterns, d.Patterns},
		{"corrupt", rep.Corrupt, d.Corrupt}, {"unmeasured", rep.Unmeasured, d.Unmeasured}, {"findings", rep.Findings, d.Findings},
		{"verdict", rep.Verdict, d.Verdict},
	} {
		a, b := generic(f.in), generic(f.to)
		if path, x, y := firstDiff(f.name, a, b); path != "" {
			return path, x, y
		}
	}
	return "", "", ""
}

// generic is v as encoding/json would read it back: maps, slices,
// float64s, strings, bools and nils, empty lists as nil.
func generic(v any) any {
	b, _ := json.Marshal(v) // the report's own types: they marshal
	var g any
	_ = json.Unmarshal(b, &g)
	return g
}

// firstDiff walks a and b together and returns the first path at which
// they differ, with each side as JSON.
func firstDiff(path string, a, b any) (string, string, string) {
	show := func(v any) string {
		if v == nil {
			return "none"
		}
		j, _ := json.Marshal(v)
		if len(j) > 120 {
			j = append(j[:117], "..."...)
		}
		return string(j)
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			break
		}
		both := maps.Clone(x)
		maps.Copy(both, y)
		for _, k := range slices.Sorted(maps.Keys(both)) {
			if p, s, t := firstDiff(path+"."+k, x[k], y[k]); p != "" {
				return p, s, t
			}
		}
		return "", "", ""
	case []any:
		y, ok := b.([]any)
		if !ok {
			break
		}
		for i := range min(len(x), len(y)) {
			if p, s, t := firstDiff(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); p != "" {
				return p, s, t
			}
		}
		if len(x) != len(y) {
			return fmt.Sprintf("%s (%d items)", path, len(x)), strconv.Itoa(len(x)) + " items", strconv.Itoa(len(y))
		}
		return "", "", ""
	}
	if !reflect.DeepEqual(a, b) {
		return path, show(a), show(b)
	}
	return "", "", ""
}
