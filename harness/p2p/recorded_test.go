package p2p

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/traffic"
)

// Every committed report re-derives from its own records: what a report
// concludes (pairs, host links, patterns, corruptions, findings, verdict)
// is what NewReport makes of the run it holds, on the GPUs and topology it
// names. The reports: those bench p2p wrote on a GPU host
// (testdata/*.json) and doctor's hazard host's (made on the stub device).
func TestRecordedReportsRederive(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	stub, _ := filepath.Glob("../doctor/testdata/amd8/p2p-*.json")
	files = append(files, stub...)
	if len(stub) == 0 {
		t.Fatal("no recorded report found")
	}
	for _, f := range files {
		rep, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{GPUs: rep.Host.GPUs, Topology: rep.Host.Topology, Sizes: rep.Options.Sizes, PatternBytes: rep.Options.PatternBytes, Reps: rep.Options.Reps}
		again := NewReport(o, rep.Run, rep.ArpatchVersion)
		for _, c := range []struct {
			what      string
			got, want any
		}{
			{"pairs", again.Pairs, rep.Pairs}, {"host links", again.HostLinks, rep.HostLinks}, {"patterns", again.Patterns, rep.Patterns},
			{"corrupt", again.Corrupt, rep.Corrupt}, {"findings", again.Findings, rep.Findings}, {"verdict", again.Verdict, rep.Verdict},
		} {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("%s: its %s do not follow from its records:\n%+v\nrecorded\n%+v", f, c.what, c.got, c.want)
			}
		}
	}
}

// TestRecordedH200HostLink reads the six runs of `arpatch bench p2p` on one
// NVIDIA H200 (testdata/h200x1-p2p-run*.json): one GPU, so no pair, no
// pattern and no model constant, one thing said unmeasured; its link to
// pinned host memory measured at every size with every byte exact. The
// README's figures are the median of the runs' medians and their range.
func TestRecordedH200HostLink(t *testing.T) {
	files, _ := filepath.Glob("testdata/h200x1-p2p-run*.json")
	if len(files) != 6 {
		t.Fatalf("%d H200 runs, want 6", len(files))
	}
	per := map[string][]float64{}
	for _, f := range files {
		rep, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Host.GPUs) != 1 || rep.Host.GPUs[0].Name != "NVIDIA H200" || len(rep.Pairs) != 0 || len(rep.Patterns) != 0 || len(rep.Corrupt) != 0 || len(rep.Unmeasured) != 1 || len(rep.HostLinks) != 1 {
			t.Fatalf("%s: gpus %v, %d pairs, %d patterns, corrupt %v, unmeasured %v, %d host links", f, rep.Host.GPUs, len(rep.Pairs), len(rep.Patterns), rep.Corrupt, rep.Unmeasured, len(rep.HostLinks))
		}
		if _, measured := rep.ModelParams(traffic.Default(), f); len(measured) != 0 {
			t.Errorf("%s: model constants %v came from one GPU", f, measured)
		}
		h := rep.HostLinks[0]
		for _, s := range []struct {
			kind string
			at   []Rate
		}{{"loads", h.Load}, {"stores", h.Store}} {
			for _, r := range s.at {
				per[fmt.Sprintf("%s %d", s.kind, r.Bytes)] = append(per[fmt.Sprintf("%s %d", s.kind, r.Bytes)], r.GBps.Median)
			}
		}
	}
	readme, err := os.ReadFile("../../docs/usage.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	for _, c := range []struct{ loads, stores string }{{"loads 8388608", "stores 8388608"}, {"loads 67108864", "stores 67108864"}, {"loads 262144", "stores 262144"}} {
		l, s := summary(per[c.loads]), summary(per[c.stores])
		if len(per[c.loads]) != 6 || !strings.Contains(text, l) || !strings.Contains(text, s) {
			t.Errorf("docs/usage.md does not give %s as %s and %s as %s", c.loads, l, c.stores, s)
		}
	}
}

// summary is "median (min-max)" of xs to one decimal.
func summary(xs []float64) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("%.1f (%.1f-%.1f)", med, s[0], s[len(s)-1])
}
