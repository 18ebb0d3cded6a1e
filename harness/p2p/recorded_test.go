package p2p

import (
	"path/filepath"
	"reflect"
	"testing"
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
