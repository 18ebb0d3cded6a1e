package p2p

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/traffic"
)

// mutate writes the amd8 clean report (handwritten in the recorded shape)
// with f applied to its generic JSON, and returns the path.
func mutate(t *testing.T, f func(m map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile("../doctor/testdata/amd8/p2p-clean.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "p2p.json")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func obj(v any, path ...any) map[string]any {
	for _, k := range path {
		switch k := k.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v.(map[string]any)
}

// firstResult is the index of the first record of test and op that ran.
func firstResult(m map[string]any, test, op string) int {
	for i, r := range m["run"].(map[string]any)["results"].([]any) {
		if r := r.(map[string]any); r["test"] == test && r["op"] == op && r["error"] == nil {
			return i
		}
	}
	panic("no " + test + " " + op)
}

// TestLoadRefusesBadData: every measured value is checked on load, and
// the summary must be what its records give; each refusal names the file
// and the field. (A value 0, negative, NaN or Infinity divided the model's
// constants, or was taken as measured.)
func TestLoadRefusesBadData(t *testing.T) {
	res := func(m map[string]any, i int) map[string]any { return obj(m, "run", "results", i) }
	for _, c := range []struct {
		name string
		f    func(m map[string]any)
		want string
	}{
		{"a summary rate of 0", func(m map[string]any) { obj(m, "pairs", 0, "write", 0, "gbps")["median"] = 0 }, "pairs[0].write[0].gbps.median is 0 in the file, but its records give 44"},
		{"a negative round trip", func(m map[string]any) { obj(m, "pairs", 0, "flag_rtt_us")["median"] = -2 }, "pairs[0].flag_rtt_us.median is -2 in the file, but its records give 2"},
		{"a link's nominal rate of 0", func(m map[string]any) { obj(m, "pairs", 0, "link")["nominal_gbps"] = 0 }, "pairs[0].link.nominal_gbps is 0 in the file, but its records give 63.008"},
		{"a pattern's rate edited", func(m map[string]any) { obj(m, "patterns", 0, "aggregate_gbps")["median"] = 1e9 }, "patterns[0].aggregate_gbps.median is 1000000000 in the file"},
		{"a verdict edited", func(m map[string]any) { m["verdict"] = "all good" }, `verdict is "all good" in the file`},
		{"a finding removed", func(m map[string]any) { m["findings"] = []any{} }, "findings (0 items) is 0 items in the file"},
		{"a record's sample of 0", func(m map[string]any) {
			res(m, firstResult(m, TestPair, OpWrite))["samples_gbps"] = []any{0, 44}
		}, "samples_gbps[0] is 0 GB/s: a measured value is a positive finite number"},
		{"a record's negative latency", func(m map[string]any) {
			res(m, firstResult(m, TestLatency, OpFlagRTT))["samples_us"] = []any{-1}
		}, "samples_us[0] is -1 µs"},
		{"a record's samples missing", func(m map[string]any) {
			delete(res(m, firstResult(m, TestPair, OpRead)), "samples_gbps")
		}, "samples_gbps is missing: a case that ran measured something"},
		{"a pattern's rank times missing", func(m map[string]any) {
			delete(res(m, firstResult(m, TestPattern, OpWrite)), "per_rank_us")
		}, `per_rank_us["0"] is missing`},
		{"a record's size of 0", func(m map[string]any) { res(m, firstResult(m, TestPair, OpRead))["bytes"] = 0 }, ".bytes is 0, want the transfer's size"},
		{"a record of an unknown test", func(m map[string]any) { res(m, 0)["test"] = "warp" }, `run.results[0].test is "warp", not a test of bench p2p`},
		{"a record naming no measured rank", func(m map[string]any) {
			res(m, firstResult(m, TestPair, OpRead))["peer"] = 9
		}, ".peer is 9, not a rank of the 4 GPUs measured"},
		{"no GPUs", func(m map[string]any) { obj(m, "host")["gpus"] = []any{} }, "host.gpus is empty"},
		{"no run", func(m map[string]any) { delete(m, "run") }, "run is missing"},
		{"no reps", func(m map[string]any) { obj(m, "options")["reps"] = 0 }, "options.reps is 0"},
		{"a size of 0", func(m map[string]any) { obj(m, "options")["sizes"] = []any{0} }, "options.sizes[0] is 0, want a positive multiple of 16 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := mutate(t, c.f)
			_, err := Load(p)
			if err == nil || !strings.HasPrefix(err.Error(), p+": ") || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "arpatch bench p2p --json NEW.json") {
				t.Errorf("Load = %v, want %q, naming the file and how to measure again", err, c.want)
			}
		})
	}
	// NaN and Infinity are no JSON numbers: the line is named.
	for _, lit := range []string{"NaN", "Infinity", "-Infinity"} {
		p := mutate(t, func(m map[string]any) {})
		b, _ := os.ReadFile(p)
		b = []byte(strings.Replace(string(b), `"reps":2`, `"reps":`+lit, 1))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil || !strings.HasPrefix(err.Error(), p+":1: a measured value is NaN or Infinity") {
			t.Errorf("%s: %v", lit, err)
		}
	}
	// Untouched, it loads.
	if _, err := Load(mutate(t, func(map[string]any) {})); err != nil {
		t.Errorf("the clean report: %v", err)
	}
}

// TestModelParamsFinite: every constant a loadable report gives the model
// is a positive finite number.
func TestModelParamsFinite(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	more, _ := filepath.Glob("../doctor/testdata/amd8/p2p-*.json")
	for _, f := range append(files, more...) {
		rep, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		_, cs := rep.ModelParams(traffic.Default(), f)
		for _, c := range cs {
			if math.IsNaN(c.Value) || math.IsInf(c.Value, 0) || c.Value <= 0 {
				t.Errorf("%s: %s = %v", f, c.Field, c.Value)
			}
		}
	}
}

// TestLoadRefusesUncheckedBytes: a record that moved bytes must say they
// were checked, in every direction and at least as many as its samples
// moved, and a host record must carry the CPU's check; otherwise its
// verdict would say every byte checked. Each refusal names the file and
// the record's field. The committed fixtures are mutated: amd8 (four GPUs,
// handwritten in the recorded shape) and a recorded one-H200 report.
func TestLoadRefusesUncheckedBytes(t *testing.T) {
	res := func(m map[string]any, i int) map[string]any { return obj(m, "run", "results", i) }
	at := func(m map[string]any, test, op string) (map[string]any, string) {
		i := firstResult(m, test, op)
		return res(m, i), "run.results[" + strconv.Itoa(i) + "]"
	}
	type tc struct {
		name string
		f    func(m map[string]any) string // the mutation; returns the error wanted
	}
	amd8 := []tc{
		{"a pair read's checks empty", func(m map[string]any) string {
			r, f := at(m, TestPair, OpRead)
			r["checks"] = []any{}
			return f + ".checks is missing or empty: the record moved bytes and checked none"
		}},
		{"a pair write's checks missing", func(m map[string]any) string {
			r, f := at(m, TestPair, OpWrite)
			delete(r, "checks")
			return f + ".checks is missing or empty"
		}},
		{"a host load's checked_bytes 0", func(m map[string]any) string {
			r, f := at(m, TestHost, OpLoad)
			obj(r, "checks", 0)["checked_bytes"] = 0
			return f + ".checks[0].checked_bytes is 0, fewer than the 134217728 bytes the record moved"
		}},
		{"a pair read checked once of two samples", func(m map[string]any) string {
			r, f := at(m, TestPair, OpRead)
			obj(r, "checks", 0)["checked_bytes"] = 67108864
			return f + ".checks[0].checked_bytes is 67108864, fewer than the 134217728 bytes the record moved"
		}},
		{"a host store without the CPU's check", func(m map[string]any) string {
			r, f := at(m, TestHost, OpStore)
			delete(r, "cpu_check")
			return f + ".cpu_check is missing"
		}},
		{"a pattern read with one direction unchecked", func(m map[string]any) string {
			r, f := at(m, TestPattern, OpRead)
			cs := r["checks"].([]any)
			r["checks"] = cs[1:]
			c := cs[0].(map[string]any)
			return fmt.Sprintf("%s.checks has no check of rank %v's transfer with peer %v", f, c["rank"], c["peer"])
		}},
		{"a latency read's checks empty", func(m map[string]any) string {
			r, f := at(m, TestLatency, OpRead)
			r["checks"] = []any{}
			return f + ".checks is missing or empty"
		}},
	}
	for _, c := range amd8 {
		t.Run("amd8/"+c.name, func(t *testing.T) {
			var want string
			p := mutate(t, func(m map[string]any) { want = c.f(m) })
			if _, err := Load(p); err == nil || !strings.HasPrefix(err.Error(), p+": ") || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "arpatch bench p2p --json NEW.json") {
				t.Errorf("Load = %v, want %q", err, want)
			}
		})
	}

	// The recorded one-H200 report: its host records.
	b, err := os.ReadFile("testdata/h200x1-p2p-run1.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []tc{
		{"a host load without the CPU's check", func(m map[string]any) string {
			r, f := at(m, TestHost, OpLoad)
			delete(r, "cpu_check")
			return f + ".cpu_check is missing"
		}},
		{"a host read latency's checks empty", func(m map[string]any) string {
			r, f := at(m, TestLatency, OpHostRead)
			r["checks"] = []any{}
			return f + ".checks is missing or empty"
		}},
		{"untouched", func(m map[string]any) string { return "" }},
	} {
		t.Run("h200x1/"+c.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			want := c.f(m)
			out, _ := json.Marshal(m)
			p := filepath.Join(t.TempDir(), "p2p.json")
			if err := os.WriteFile(p, out, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			switch {
			case want == "" && err != nil:
				t.Errorf("the recorded report: %v", err)
			case want != "" && (err == nil || !strings.HasPrefix(err.Error(), p+": ") || !strings.Contains(err.Error(), want)):
				t.Errorf("Load = %v, want %q", err, want)
			}
		})
	}
}
