package nvsmi

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// recordings are nvidia-smi's outputs recorded on real hosts
// (harness/doctor/testdata/HOST/FILE), the fuzzers' seeds beside those
// under testdata/fuzz; with malformed, also those made malformed
// (testdata/malformed-*), which doctor's tests run too.
func recordings(t testing.TB, file string, malformed bool) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "doctor", "testdata", "*", file))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no recorded %s: %v", file, err)
	}
	var out []string
	for _, p := range paths {
		if !malformed && strings.HasPrefix(filepath.Base(filepath.Dir(p)), "malformed-") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// TestMalformed: output that nvidia-smi does not print is an error that
// names the line, each kind of it.
func TestMalformed(t *testing.T) {
	q := "index, name, pci.bus_id\n0, A, 00:01\n1, A, 00:02\n"
	for _, c := range []struct {
		name, out, want string
		parse           func(string) error
	}{
		{"query: an index twice", q + "0, A, 00:03\n", "nvidia-smi --query-gpu line 4: GPU index 0 again (line 2 has it): each GPU has one row", queryErr},
		{"query: a negative index", q + "-1, A, 00:03\n", "nvidia-smi --query-gpu line 4: GPU index -1 is negative", queryErr},
		{"query: a bad quote", q + "2, \"A, 00:03\n", "nvidia-smi --query-gpu: parse error on line 4", queryErr},
		{"query: no row", "index, name\n", "printed no GPU rows", queryErr},
		{"query: an index that is no number", q + "two, A, 00:03\n", "nvidia-smi --query-gpu line 4: GPU index \"two\" is not a number", queryErr},
		{"query: an index past the GPUs", q + "3, A, 00:03\n", "nvidia-smi --query-gpu line 4: GPU index 3 of 3 GPUs: nvidia-smi numbers them 0 to 2", queryErr},
		{"query: a bus id twice", q + "2, A, 00:02\n", "nvidia-smi --query-gpu line 4: bus id 00:02 again (line 3 has it)", queryErr},
		{"topo: a link that differs both ways", "\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tPIX\t X \n", "nvidia-smi topo -m: GPU1 to GPU0 is PIX, but GPU0 to GPU1 is SYS", topoErr},
		{"topo: a row twice", "\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU0\tNV1\t X \n", "nvidia-smi topo -m line 3: row GPU0 twice", topoErr},
		{"topo: rows out of order", "\tGPU0\tGPU1\nGPU1\tNV1\t X \nGPU0\t X \tNV1\n", "nvidia-smi topo -m line 2: row GPU1 where the header (line 1) has GPU0 or GPU1", topoErr},
		{"topo: a row too many", "\tGPU0\nGPU0\t X \nGPU1\t X \n", "nvidia-smi topo -m line 3: row GPU1 where the header (line 1) has no more GPUs", topoErr},
		{"topo: a row too few", "\tGPU0\tGPU1\nGPU0\t X \tNV1\n", "nvidia-smi topo -m: 1 GPU rows for the 2 GPU columns of the header (line 1)", topoErr},
		{"topo: a column twice", "\tGPU0\tGPU0\nGPU0\t X \tNV1\n", "nvidia-smi topo -m line 1: column GPU0 twice", topoErr},
		{"topo: a short row", "\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV1\t X \n", "nvidia-smi topo -m: row GPU0 has 1 links for 2 GPUs", topoErr},
		{"p2p: a row twice", " \tGPU0\tGPU1\n GPU0\tX\tOK\n GPU0\tOK\tX\n", "nvidia-smi topo -p2p line 3: row GPU0 where the header (line 1) has GPU1", p2pErr},
		{"p2p: a short row", " \tGPU0\tGPU1\n GPU0\tX\n GPU1\tOK\tX\n", "nvidia-smi topo -p2p line 2: row GPU0 has 1 cells for 2 GPUs", p2pErr},
		{"p2p: a row too few", " \tGPU0\tGPU1\n GPU0\tX\tOK\n", "nvidia-smi topo -p2p: 1 GPU rows for the 2 GPUs of the header (line 1)", p2pErr},
		{"p2p: a GPU twice in the header", " \tGPU0\tGPU0\n GPU0\tX\tOK\n", "nvidia-smi topo -p2p line 1: GPU GPU0 twice in the header", p2pErr},
		{"p2p: a row too many", " \tGPU0\n GPU0\tX\n GPU1\tX\n", "nvidia-smi topo -p2p line 3: row GPU1 where the header (line 1) has no more GPUs", p2pErr},
	} {
		if err := c.parse(c.out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// The recorded outputs all parse.
	for _, o := range recordings(t, "query-gpu.csv", false) {
		if err := queryErr(o); err != nil {
			t.Errorf("recorded query-gpu: %v", err)
		}
	}
	for _, o := range recordings(t, "topo-m.txt", false) {
		if err := topoErr(o); err != nil {
			t.Errorf("recorded topo -m: %v", err)
		}
	}
	for _, o := range append(recordings(t, "topo-p2p-r.txt", false), recordings(t, "topo-p2p-w.txt", false)...) {
		if err := p2pErr(o); err != nil {
			t.Errorf("recorded topo -p2p: %v", err)
		}
	}
}

func queryErr(s string) error { _, err := ParseQueryGPU(s); return err }
func topoErr(s string) error  { _, err := ParseTopoMatrix(s); return err }
func p2pErr(s string) error   { _, err := ParseP2P(s); return err }

// TestSubRepeats: a name given twice to Sub is taken once (a repeated GPU
// index once made Blocked index past the matrix).
func TestSubRepeats(t *testing.T) {
	m, err := ParseP2P(" \tGPU0\tGPU1\n GPU0\tX\tNS\n GPU1\tNS\tX\n")
	if err != nil {
		t.Fatal(err)
	}
	s := m.Sub([]string{"GPU0", "GPU0", "GPU1", "GPU7"})
	if !slices.Equal(s.GPUs, []string{"GPU0", "GPU1"}) || !slices.Equal(s.Blocked(), []string{"GPU0->GPU1: NS", "GPU1->GPU0: NS"}) {
		t.Errorf("Sub: %+v, blocked %v", s, s.Blocked())
	}
	// A matrix made by hand, not square: no method indexes past it.
	odd := &P2PMatrix{GPUs: []string{"GPU0"}, Status: map[string][]string{"GPU0": {"X", "NS", "U"}}}
	_, _ = odd.Blocked(), odd.Unknown()
	_ = odd.Sub([]string{"GPU0"})
	top := &Topology{GPUs: []string{"GPU0", "GPU1"}, Links: map[string][]string{"GPU0": {"X"}}}
	_ = top.Sub([]string{"GPU1", "GPU0"})
}

// checkTopology: a parsed topology is square over unique GPUs, and every
// method, and Sub of any selection (repeats and unknown names included),
// runs without panic and stays square.
func checkTopology(t *testing.T, tp *Topology) {
	seen := map[string]bool{}
	for _, g := range tp.GPUs {
		if seen[g] || len(tp.Links[g]) != len(tp.GPUs) {
			t.Fatalf("parsed topology not square over unique GPUs: %+v", tp)
		}
		seen[g] = true
	}
	_, _, _, _, _ = tp.FullNVLink(), tp.PCIeOnly(), tp.NUMANodes(), tp.LinkCounts(), tp.Summary()
	sel := append(append([]string{"GPU99"}, tp.GPUs...), tp.GPUs...)
	slices.Reverse(sel)
	s := tp.Sub(sel)
	for _, g := range s.GPUs {
		if len(s.Links[g]) != len(s.GPUs) {
			t.Fatalf("Sub not square: %+v", s)
		}
	}
}

func checkP2P(t *testing.T, m *P2PMatrix) {
	seen := map[string]bool{}
	for _, g := range m.GPUs {
		if seen[g] || len(m.Status[g]) != len(m.GPUs) {
			t.Fatalf("parsed P2P matrix not square over unique GPUs: %+v", m)
		}
		seen[g] = true
	}
	_, _ = m.Blocked(), m.Unknown()
	sel := append(append([]string{"GPU99"}, m.GPUs...), m.GPUs...)
	slices.Reverse(sel)
	s := m.Sub(sel)
	_, _ = s.Blocked(), s.Unknown()
	for _, g := range s.GPUs {
		if len(s.Status[g]) != len(s.GPUs) {
			t.Fatalf("Sub not square: %+v", s)
		}
	}
}

// FuzzParseQueryGPU: never a panic; a parse has unique, non-negative
// indexes.
func FuzzParseQueryGPU(f *testing.F) {
	for _, s := range recordings(f, "query-gpu.csv", true) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		gpus, err := ParseQueryGPU(out)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, g := range gpus {
			if g.Index < 0 || seen[g.Index] {
				t.Fatalf("index %d negative or twice: %+v", g.Index, gpus)
			}
			seen[g.Index] = true
		}
	})
}

// FuzzParseTopoMatrix: never a panic; a parse is square (checkTopology).
func FuzzParseTopoMatrix(f *testing.F) {
	for _, s := range recordings(f, "topo-m.txt", true) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		if tp, err := ParseTopoMatrix(out); err == nil {
			checkTopology(t, tp)
		}
	})
}

// FuzzParseP2P: never a panic; a parse is square (checkP2P).
func FuzzParseP2P(f *testing.F) {
	for _, s := range append(recordings(f, "topo-p2p-r.txt", true), recordings(f, "topo-p2p-w.txt", true)...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		if m, err := ParseP2P(out); err == nil {
			checkP2P(t, m)
		}
	})
}

// TestDrivers runs a stand-in nvidia-smi on PATH: Drivers keeps its
// lines, trimmed and without blanks, and is nil when nvidia-smi fails or
// is missing.
func TestDrivers(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\n[ \"$*\" = \"--query-gpu=name,driver_version --format=csv,noheader\" ] || exit 3\nprintf 'NVIDIA H200, 570.124.06\\n\\n  NVIDIA H200, 570.124.06  \\n'\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	got := Drivers(context.Background())
	if want := []string{"NVIDIA H200, 570.124.06", "NVIDIA H200, 570.124.06"}; !slices.Equal(got, want) {
		t.Errorf("Drivers = %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte("#!/bin/sh\nexit 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := Drivers(context.Background()); got != nil {
		t.Errorf("failing nvidia-smi: Drivers = %q, want nil", got)
	}
	t.Setenv("PATH", t.TempDir())
	if got := Drivers(context.Background()); got != nil {
		t.Errorf("no nvidia-smi: Drivers = %q, want nil", got)
	}
}
