package nightly

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/nightly/internal/fixture"
)

// A revision in also_check that does not resolve is a warning, not a
// failure; one already checked is not checked twice.
func TestAlsoCheck(t *testing.T) {
	w := newWorld(t)
	w.cfg.Upstream.Also = []string{"no-such-branch", "master", w.commit}
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ExitCode != ExitOK || len(rep.Drift) != 1 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "no-such-branch") {
		t.Fatalf("exit %d, %d drift rows, warnings %v", rep.ExitCode, len(rep.Drift), rep.Warnings)
	}
	if c := w.check(rep, "also_check no-such-branch"); c.Status != "skip" {
		t.Errorf("check %+v", c)
	}
}

// TestDriftHeadlineNamesTheRevision: a series that fits the tracked head
// but not the pinned commit drifts at the pinned commit, and the headline
// says so rather than naming the tracked ref.
func TestDriftHeadlineNamesTheRevision(t *testing.T) {
	w := newWorldOwn(t) // commits to its upstream
	// Upstream moves on; the series is refreshed for the new head only.
	head := w.commitUpstream("rename", map[string]string{
		"sgl-kernel/csrc/allreduce/custom_all_reduce.cu": strings.Replace(fixture.Cu, "one();", "one_stage();", 1),
	})
	patch := strings.Replace(fixturePatch, "   one();", "   one_stage();", 1)
	sum := sha256.Sum256([]byte(patch))
	if err := testrepo.WriteFiles(w.dir, map[string]string{
		"series/fx/0001-dispatch.patch": patch,
		"series/fx/series.toml":         "name = \"fx\"\nfamily = \"fx\"\ntested_on = [\"" + head + "\"]\n\n[[patch]]\nfile = \"0001-dispatch.patch\"\nsha256 = \"" + hex.EncodeToString(sum[:]) + "\"\n",
	}); err != nil {
		t.Fatal(err)
	}
	w.cfg.Arms.PatchesDir = "series" // this world's, not the shared arms'
	rep, err := Run(context.Background(), Options{Config: w.cfg, Env: w.env, SkipBuild: true, SkipBench: true,
		Probe: func(context.Context) Environment { return Environment{} }})
	if err != nil {
		t.Fatal(err)
	}
	want := "drift: the series no longer applies to pinned commit " + w.commit[:12]
	if rep.ExitCode != ExitDrift || !strings.HasPrefix(rep.Verdict, want) || strings.Contains(rep.Verdict, "applies to master") {
		t.Errorf("exit %d verdict %q, want it to start %q", rep.ExitCode, rep.Verdict, want)
	}
	if !reflect.DeepEqual(rep.DriftedAt, []string{"pinned commit " + w.commit[:12]}) {
		t.Errorf("drifted at %q", rep.DriftedAt)
	}
}
