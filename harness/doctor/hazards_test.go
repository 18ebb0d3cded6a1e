package doctor

import (
	"context"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/p2p"
	"github.com/arpatch/arpatch/harness/traffic"
)

// amd8 is the hazard host (testdata/amd8, handwritten in the recorded
// shapes): IOMMU groups of type DMA-FQ, one per GPU, and no iommu=pt on
// the kernel command line (an AMD host's default), and lspci's rendering
// of the switch ports' config space.
func amd8(t *testing.T, extra Options) Options {
	t.Helper()
	lspci, err := os.ReadFile("testdata/amd8/lspci-vvv.txt")
	if err != nil {
		t.Fatal(err)
	}
	// sysfs, in the shape the kernel writes it (Documentation/ABI/testing/
	// sysfs-kernel-iommu_groups): a group per device, its type, a link per
	// device (an empty file here).
	fsys := fstest.MapFS{"proc/cmdline": {Data: []byte("BOOT_IMAGE=/boot/vmlinuz-6.8.0-49-generic root=UUID=4c1f ro quiet splash\n")}}
	for i, bdf := range []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0", "0000:c1:00.0"} {
		dir := "sys/kernel/iommu_groups/" + []string{"30", "31", "44", "45", "60", "61", "74", "75", "90"}[i]
		fsys[dir+"/type"] = &fstest.MapFile{Data: []byte("DMA-FQ\n")}
		fsys[dir+"/devices/"+bdf] = &fstest.MapFile{}
	}
	o := extra
	o.Run, o.FS = recorded(t, "amd8", map[string]string{"lspci -D -vvv": string(lspci)}), fsys
	o.Env = append([]string{"CUDA_VISIBLE_DEVICES=0,1,4,5"}, o.Env...)
	return o
}

func loadP2P(t *testing.T, name string) *p2p.Report {
	t.Helper()
	rep, err := p2p.Load("testdata/amd8/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Every hazard doctor names, on the host that has them all: translated
// DMA, ACS redirection above the GPUs that share a switch, and a measured
// pair that corrupts (p2p-corrupt.json), which fails doctor and its
// verdict.
func TestHazards(t *testing.T) {
	rep := Inspect(context.Background(), amd8(t, Options{P2P: loadP2P(t, "p2p-corrupt.json"), P2PFile: "p2p-corrupt.json"}))
	f := ids(rep)
	if got := f["iommu.translate"]; got.Severity != Warn || got.Title != "the IOMMU translates the GPUs' DMA: group 30 (DMA-FQ: GPU0), group 31 (DMA-FQ: GPU1), group 60 (DMA-FQ: GPU4), group 61 (DMA-FQ: GPU5)" ||
		!strings.Contains(got.Detail, "(no iommu=pt or equivalent)") || !strings.HasPrefix(got.Remedy, "add iommu=pt to the kernel command line") ||
		!strings.HasSuffix(got.Remedy, "then check every byte P2P moves with `arpatch bench p2p --json p2p-corrupt-new.json`, then `arpatch doctor --p2p p2p-corrupt-new.json`") {
		t.Errorf("iommu.translate %+v", got)
	}
	acs := f["pci.acs-redirect"]
	if acs.Severity != Warn || acs.Title != "ACS redirects P2P through the root complex at 4 PCIe switch ports above GPU0, GPU1, GPU4, GPU5" ||
		!strings.Contains(acs.Detail, "0000:17:00.0 (ReqRedir, CmpltRedir; behind it GPU0)") ||
		!strings.Contains(acs.Remedy, "`setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000`, `setpci -s 0000:17:01.0 ECAP_ACS+0x6.w=0000`, `setpci -s 0000:99:00.0 ECAP_ACS+0x6.w=0000`, `setpci -s 0000:99:01.0 ECAP_ACS+0x6.w=0000`") ||
		!strings.Contains(acs.Remedy, "pci=disable_acs_redir=0000:17:00.0;0000:17:01.0;0000:99:00.0;0000:99:01.0") {
		t.Errorf("pci.acs-redirect %+v", acs)
	}
	bad := f["p2p.corrupt"]
	if bad.Severity != Error || bad.Title != "P2P reports OK but corrupts data between GPU1 and GPU4 (measured: p2p-corrupt.json)" ||
		!strings.HasPrefix(bad.Remedy, "custom allreduce must not run there: serve with --disable-custom-all-reduce") {
		t.Errorf("p2p.corrupt %+v", bad)
	}
	if !strings.HasPrefix(rep.Verdict, "P2P reports OK but corrupts data between GPU1 and GPU4 (measured: p2p-corrupt.json): custom allreduce must not run here") {
		t.Errorf("verdict %q", rep.Verdict)
	}
	// Nothing of a report that found corrupt data reaches the model.
	if !strings.Contains(rep.Expect, "(an estimate, calibrated constants)") {
		t.Errorf("expect %q", rep.Expect)
	}
	// The GPUs not judged are in no finding: GPU2 and GPU3 share a switch,
	// but the job does not use them.
	if strings.Contains(acs.Title, "GPU2") || strings.Contains(f["iommu.translate"].Title, "GPU2") {
		t.Error("a GPU the job does not use was judged")
	}
}

// The model's constants come from a measurement file when one is given,
// and the expect: line says so, constant by constant.
func TestExpectTakesMeasuredConstants(t *testing.T) {
	calibrated := Inspect(context.Background(), amd8(t, Options{}))
	measured := Inspect(context.Background(), amd8(t, Options{P2P: loadP2P(t, "p2p-clean.json"), P2PFile: "p2p-clean.json"}))
	if !strings.HasPrefix(calibrated.Expect, "traffic model (an estimate, calibrated constants) at the verify shape (40K, world size 4): ") {
		t.Errorf("calibrated expect %q", calibrated.Expect)
	}
	m := measured.Host.P2P.Report
	p, consts := m.ModelParams(traffic.Default(), "p2p-clean.json")
	// What the report measured, then what the model changed to agree
	// with it (not measured: never listed as measured).
	var listed, derived []string
	for _, c := range consts {
		if c.Derived {
			derived = append(derived, c.String())
		} else {
			listed = append(listed, c.String())
		}
	}
	if got := strings.Join(derived, ", "); !strings.HasPrefix(got, "kernel_store_efficiency 1 ") || !strings.Contains(got, "root_complex_write_gbps") || strings.Contains(got, "barrier_us") {
		t.Errorf("derived constants %q", got)
	}
	want := "traffic model (an estimate, constants measured: p2p-clean.json (" + m.Host.Name + ", " + m.CreatedAt.Format("2006-01-02") + "): " + strings.Join(listed, ", ") +
		"; not measured, adjusted to them: " + strings.Join(derived, ", ") + "; the rest calibrated) at the verify shape (40K, world size 4): "
	if !strings.HasPrefix(measured.Expect, want) {
		t.Errorf("measured expect\n%s\nwant it to start\n%s", measured.Expect, want)
	}
	// The stub measured writes at 44 GB/s and reads at 21 alone, the same
	// in the patterns: all four GPUs reading across the sockets put 8
	// reads of 4M through each socket's root complex (SYS).
	for field, v := range map[string]float64{"pcie_efficiency": 44 / (16 * 3.938), "kernel_store_efficiency": 1, "barrier_us": 1} {
		found := false
		for _, c := range consts {
			if c.Field == field {
				found = true
				if d := c.Value - v; d > 1e-9 || d < -1e-9 {
					t.Errorf("%s = %v, want %v (from %s)", field, c.Value, v, c.From)
				}
			}
		}
		if !found {
			t.Errorf("%s not measured: %q", field, listed)
		}
	}
	if p.Source == "calibrated" || calibrated.Expect == measured.Expect || !measured.Host.P2P.Covers {
		t.Error("the measured constants changed nothing")
	}
	// A report of other GPUs is not used, and doctor says so.
	other := Inspect(context.Background(), amd8(t, Options{P2P: loadP2P(t, "p2p-clean.json"), P2PFile: "p2p-clean.json", Env: []string{"CUDA_VISIBLE_DEVICES=0,1,2,3"}}))
	if f := ids(other)["p2p.other-gpus"]; f.Severity != Warn || !strings.Contains(f.Detail, "it measured GPU0, GPU1, GPU4, GPU5") || !strings.Contains(other.Expect, "calibrated constants") {
		t.Errorf("other GPUs: %+v, expect %q", f, other.Expect)
	}
}

// lspci -vvv's fields doctor reads, as pciutils prints them for the
// fixture's config space: where lspci is installed, the committed
// rendering is what it prints now (device names come from the machine's
// pci.ids and are not compared).
func TestLSPCIRendering(t *testing.T) {
	b, err := os.ReadFile("testdata/amd8/lspci-vvv.txt")
	if err != nil {
		t.Fatal(err)
	}
	devs := ParseLSPCI(string(b))
	if len(devs) != 24 {
		t.Fatalf("%d devices", len(devs))
	}
	ds := devs[4] // in lspci's order: the root ports, the switch's upstream port, its downstream ports, ...
	if ds.BDF != "0000:17:01.0" || ds.Port != "Downstream Port" || ds.Secondary != 0x2a || ds.Subordinate != 0x2a ||
		!reflect.DeepEqual(ds.ACSCtl, map[string]bool{"SrcValid": true, "TransBlk": false, "ReqRedir": true, "CmpltRedir": true, "UpstreamFwd": true, "EgressCtrl": false, "DirectTrans": false}) {
		t.Errorf("downstream port %+v", ds)
	}
	if rp, gpu := devs[0], devs[5]; rp.Port != "Root Port" || rp.ACSCtl["ReqRedir"] || gpu.BDF != "0000:18:00.0" || gpu.Port != "Endpoint" || gpu.Secondary != -1 {
		t.Errorf("root port %+v, GPU %+v", rp, gpu)
	}
	if denied := ParseLSPCI("17:00.0 PCI bridge: x\n\tCapabilities: <access denied>\n"); len(denied) != 1 || !denied[0].Denied || denied[0].BDF != "0000:17:00.0" {
		t.Errorf("a user's lspci: %+v", denied)
	}
	lspci, err := exec.LookPath("lspci")
	if err != nil {
		t.Skip("no lspci to compare the rendering with")
	}
	out, err := exec.Command(lspci, "-F", "testdata/amd8/lspci-xxxx.txt", "-D", "-vvv").Output()
	if err != nil {
		t.Fatal(err)
	}
	strip := func(ds []PCIDevice) []PCIDevice {
		for i := range ds {
			ds[i].Desc = ""
		}
		return ds
	}
	if got := strip(ParseLSPCI(string(out))); !reflect.DeepEqual(got, strip(devs)) {
		t.Errorf("lspci renders the dump otherwise than lspci-vvv.txt:\n%+v\nwant\n%+v", got, devs)
	}
}

// NCCL took SHM between GPUs where P2P works: doctor tells NCCL's policy
// (past a CPU host bridge) from P2P that is blocked, and from a variable
// that turned it off, with the remedy each needs.
func TestNCCLSHM(t *testing.T) {
	b, err := os.ReadFile("testdata/amd8/nccl-info.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	rep := Inspect(context.Background(), amd8(t, Options{NCCLLog: lines, NCCLLogFile: "nccl.log"}))
	pol := ids(rep)["nccl.shm-policy"]
	if pol.Severity != Warn || pol.Title != "NCCL chose SHM by policy between GPU1-GPU4 (SYS), GPU0-GPU5 (SYS), though P2P works there" ||
		!strings.Contains(pol.Detail, "nvidia-smi reports P2P OK for these pairs (nccl.log)") ||
		!strings.HasSuffix(pol.Remedy, "`CUDA_VISIBLE_DEVICES=0,1,4,5 NCCL_P2P_LEVEL=SYS arpatch bench allreduce --world-size 4 --impl nccl --log nccl-sys.log`, then `arpatch doctor --nccl-log nccl-sys.log`") {
		t.Errorf("nccl.shm-policy %+v", pol)
	}
	if _, ok := ids(rep)["nccl.p2p-blocked"]; ok {
		t.Error("P2P reported blocked where nvidia-smi says OK")
	}
	// The same log where P2P is blocked between GPU1 and GPU4: nvidia-smi
	// says CNS, or NCCL itself says it is disabled.
	h := &rep.Host
	j := &rep.Judged
	hosts := judge(h, j)
	g := hosts[0]
	ok := g.P2PWrite
	w := *g.P2PWrite
	w.Status = map[string][]string{}
	for k, v := range g.P2PWrite.Status {
		w.Status[k] = append([]string(nil), v...)
	}
	w.Status["GPU1"][2] = "CNS" // GPU1 -> GPU4 (the judged order 0,1,4,5)
	g.P2PWrite = &w
	got := map[string]Finding{}
	for _, f := range ncclFindings(g, j) {
		got[f.ID] = f
	}
	if f := got["nccl.p2p-blocked"]; f.Title != "NCCL uses SHM between GPU1-GPU4 (SYS): P2P is blocked there" || !strings.Contains(f.Remedy, "`arpatch bench p2p`") ||
		got["nccl.shm-policy"].Title != "NCCL chose SHM by policy between GPU0-GPU5 (SYS), though P2P works there" {
		t.Errorf("blocked: %+v", got)
	}
	g.P2PWrite = ok
	off := append([]string{"amd8:4102:4102 [1] NCCL INFO P2P is disabled between connected GPUs 5 and 0. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1."}, lines...)
	g.NCCL = &NCCLLog{File: "x.log", Transport: allreduce.ParseNCCLTransport(off)}
	if fs := ncclFindings(g, j); len(fs) != 2 || fs[0].Title != "NCCL uses SHM between GPU0-GPU5 (SYS): P2P is blocked there" {
		t.Errorf("NCCL's own line: %+v", fs)
	}
	g.NCCL = &NCCLLog{File: "x.log", Transport: allreduce.ParseNCCLTransport(append(lines, "amd8:4101:4101 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1."))}
	if fs := ncclFindings(g, j); len(fs) != 1 || fs[0].ID != "nccl.p2p-disabled" || fs[0].Title != "NCCL uses SHM between GPUs: NCCL_P2P_DISABLE=1 was set for the run of x.log" {
		t.Errorf("disabled: %+v", fs)
	}
	g.NCCL = &NCCLLog{File: "x.log", Transport: allreduce.ParseNCCLTransport(append(lines, "amd8:4101:4101 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to PXB"))}
	if fs := ncclFindings(g, j); len(fs) != 1 || fs[0].Title != "NCCL_P2P_LEVEL=PXB leaves GPU1-GPU4 (SYS), GPU0-GPU5 (SYS) on SHM, though P2P works there" {
		t.Errorf("level: %+v", fs)
	}
}
