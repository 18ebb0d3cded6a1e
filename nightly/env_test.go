package nightly

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/errwriter/errwritertest"
)

// TestHostChange: five nights on one host, then one on another host
// (another driver and topology, same GPU model) where both arms are 10%
// slower. That is no regression: the checks against history are not
// judged, and the verdict, summary and JUnit say what changed and how to
// take the new host as the reference; once accepted, it is compared.
func TestHostChange(t *testing.T) { synctest.Test(t, testHostChange) }

func testHostChange(t *testing.T) {
	w := newWorld(t)
	w.cfg.Bench.Trials = 3
	w.serve("a", 1000)
	w.serve("b", 1600)
	w.host = Environment{GPUModel: "Test GPU", GPUCount: 8, Host: "box-a", Driver: "570.172.08", CUDA: "12.8", Torch: "2.9.1", Topology: "8 GPUs: NODE 8, PIX 4, SYS 16; 2 NUMA nodes"}
	for night := 1; night <= 5; night++ { // no builds: the servers are attached
		if rep := w.run(context.Background(), true); rep.ExitCode != ExitOK {
			t.Fatalf("night %d: exit %d %s", night, rep.ExitCode, rep.Verdict)
		}
	}
	w.host.Host, w.host.Driver, w.host.Topology = "box-b", "580.95.05", "8 GPUs: NVLink 4, NODE 8, SYS 16; 2 NUMA nodes"
	w.serve("a", 900)
	w.serve("b", 1440)
	rep := w.run(context.Background(), true)
	want := "the environment changed since run 5 (host box-a -> box-b, driver 570.172.08 -> 580.95.05, topology 8 GPUs: NODE 8, PIX 4, SYS 16; 2 NUMA nodes -> 8 GPUs: NVLink 4, NODE 8, SYS 16; 2 NUMA nodes): not compared with history; " +
		"if the change is intended, make this run the reference: `arpatch history accept 6 --db " + filepath.Join(w.dir, "history.db") + "`"
	if rep.ExitCode != ExitOK || rep.Verdict != "no regression; "+want {
		t.Fatalf("night 6: exit %d verdict %q", rep.ExitCode, rep.Verdict)
	}
	for _, arm := range []string{"base", "patched"} {
		if r := findReg(rep, arm, "tok_s", "history"); r.Verdict != "not compared" || r.RefRuns != 5 || r.Tonight > r.Reference*0.95 {
			t.Errorf("%s vs history: %+v", arm, r)
		}
	}
	if c := w.check(rep, "environment vs reference runs"); c.Status != "skip" || c.Detail != want {
		t.Errorf("environment check %+v", c)
	}
	var junit, summary bytes.Buffer
	must(t, JUnit(&junit, rep))
	must(t, Summary(&summary, rep))
	// Each renderer returns its writer's error, whichever write fails.
	errwritertest.EveryWriteFails(t, func(w io.Writer) error { return JUnit(w, rep) })
	errwritertest.EveryWriteFails(t, func(w io.Writer) error { return Summary(w, rep) })
	if !strings.Contains(junit.String(), `<testcase classname="arpatch.environment" name="environment vs reference runs">`) ||
		!strings.Contains(junit.String(), `<skipped message="the environment changed since run 5 (host box-a -&gt; box-b`) || strings.Contains(junit.String(), "<failure") {
		t.Errorf("junit:\n%s", junit.String())
	}
	if !strings.Contains(summary.String(), "> **Environment changed** since run 5: host box-a -> box-b, driver 570.172.08 -> 580.95.05") ||
		!strings.Contains(summary.String(), "`arpatch history accept 6 --db ") {
		t.Errorf("summary:\n%s", summary.String())
	}
	// Night 7 on the new host, not accepted yet: still flagged, not judged.
	if rep = w.run(context.Background(), true); rep.ExitCode != ExitOK || rep.EnvChange == nil || rep.EnvChange.Since != 5 {
		t.Fatalf("night 7: exit %d %+v", rep.ExitCode, rep.EnvChange)
	}
	// Accepted: night 8 compares with nights 6 and 7 on the new host.
	store, err := history.Open(filepath.Join(w.dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Accept(6); err != nil {
		t.Fatal(err)
	}
	must(t, store.Close())
	rep = w.run(context.Background(), true)
	if r := findReg(rep, "patched", "tok_s", "history"); rep.ExitCode != ExitOK || rep.EnvChange != nil || r.Verdict == "not compared" || r.RefRuns != 2 {
		t.Fatalf("after accept: exit %d %+v %+v", rep.ExitCode, rep.EnvChange, r)
	}
	if c := w.check(rep, "environment vs reference runs"); c.Status != "pass" || c.Detail != "same host, gpu_count, driver, cuda, torch, nccl, topology as reference runs 6..7" {
		t.Errorf("environment check %+v", c)
	}
}
