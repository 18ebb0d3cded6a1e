package doctor

import (
	"context"
	"strings"
	"testing"
)

// TestExpectation: doctor says what the traffic model expects at the
// verify shape on the recorded hosts. On pcie8, GPU2's link trained at
// gen 1 (3.4 GB/s) carries the ring's 1.75 x 40K: 20.9 µs on top of NCCL's
// 27.2 µs of steps.
func TestExpectation(t *testing.T) {
	pcie := Inspect(context.Background(), Options{Run: p2pWriteOK(t, "pcie8")})
	model := "traffic model (an estimate) at the verify shape (40K, world size 8): nccl-ring 48.1 µs, nccl-tree 51.1 µs, custom-2stage 104.6 µs, custom-1stage 382.2 µs; " +
		"NCCL over SHM, as in the published account, 220.9 µs"
	want := model + "; PCIe dispatch fit: 1-stage up to 576B, custom allreduce up to 9K (103K against SHM NCCL); " +
		"measure with `arpatch tune allreduce --world-size 8`"
	if pcie.Expect != want {
		t.Errorf("pcie8 with P2P write OK:\n got %q\nwant %q", pcie.Expect, want)
	}
	// As recorded, P2P write is CNS across the sockets: SGLang's P2P check
	// disables custom allreduce, so expect: suggests no custom allreduce
	// and no tune command.
	pcie = Inspect(context.Background(), Options{Run: recorded(t, "pcie8", nil)})
	want = model + "; custom allreduce does not start here: P2P write is not supported between 32 GPU pairs (GPU0->GPU4: CNS), " +
		"and SGLang's P2P check disables custom allreduce without it; its figures hold only once that changes"
	if pcie.Expect != want {
		t.Errorf("pcie8:\n got %q\nwant %q", pcie.Expect, want)
	}
	nv := Inspect(context.Background(), Options{Run: recorded(t, "h200x2", nil)})
	want = "traffic model (an estimate) at the verify shape (40K, world size 2): custom-1stage 4.7 µs, custom-2stage 7.3 µs, nccl-ring 8.7 µs, nccl-tree 8.7 µs; " +
		"NCCL over SHM, as in the published account, 33.4 µs; full NVLink: the PCIe dispatch is not used here"
	if nv.Expect != want {
		t.Errorf("h200x2:\n got %q\nwant %q", nv.Expect, want)
	}
}

// TestVerdictFollowsModel: the verdict's word on 1-stage is the traffic
// model's. On 4 GPUs behind one switch (no root complex on any path) the
// model expects 1-stage to win at the verify shape, and the verdict must
// not call it contention-prone; on pcie8 (two switches per socket, two
// sockets) it expects the NCCL ring, and the verdict says 1-stage is
// contention-prone there.
func TestVerdictFollowsModel(t *testing.T) {
	sw := Inspect(context.Background(), Options{Run: recorded(t, "switch4", nil)})
	if want := "PCIe-only, 4 GPUs: the traffic model expects custom 1-stage to win at the verify shape (9.0 µs; see expect); measure with `arpatch bench allreduce --world-size 4 --src sglang` first (after `arpatch build --allreduce-ext --src sglang`)"; sw.Verdict != want {
		t.Errorf("switch4 verdict:\n got %q\nwant %q", sw.Verdict, want)
	}
	if !strings.Contains(sw.Expect, "custom-1stage 9.0 µs, custom-2stage 11.8 µs") {
		t.Errorf("switch4 expect: %q", sw.Expect)
	}
	pcie := Inspect(context.Background(), Options{Run: p2pWriteOK(t, "pcie8")})
	if want := "all-to-all 1-stage is contention-prone here: the traffic model expects nccl-ring to win at the verify shape (48.1 µs against 1-stage's 382.2; see expect)"; !strings.Contains(pcie.Verdict, want) {
		t.Errorf("pcie8 verdict:\n got %q\nwant it to contain %q", pcie.Verdict, want)
	}
}

// p2pWriteOK is the recorded host with P2P write as OK as P2P read (on
// pcie8 and nvpairs8, read is OK between every pair).
func p2pWriteOK(t *testing.T, host string) Runner {
	rec := recorded(t, host, nil)
	return func(ctx context.Context, name string, args ...string) (string, error) {
		if name == "nvidia-smi" && strings.Join(args, " ") == "topo -p2p w" {
			args = []string{"topo", "-p2p", "r"}
		}
		return rec(ctx, name, args...)
	}
}
