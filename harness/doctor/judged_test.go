package doctor

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/internal/gitsrc"
)

func nvpairs8(t *testing.T) []nvsmi.GPU {
	t.Helper()
	b, err := os.ReadFile("testdata/nvpairs8/query-gpu.csv")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := nvsmi.ParseQueryGPU(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

// TestResolveVisible checks CUDA_VISIBLE_DEVICES against the rules torch
// reads it with (_parse_visible_devices, _transform_uuid_to_ordinals,
// _device_count_nvml), on the 8-GPU fixture's indexes and UUIDs.
func TestResolveVisible(t *testing.T) {
	gpus := nvpairs8(t)
	for _, c := range []struct {
		spec string
		set  bool
		want []int
		note string // a substring of Note; "" for none
	}{
		{"", false, []int{0, 1, 2, 3, 4, 5, 6, 7}, ""},
		{"", true, []int{}, `entry ""`},
		{"0,1", true, []int{0, 1}, ""},
		{"2,1", true, []int{2, 1}, ""},
		{"0,2,-1,1", true, []int{0, 2}, `entry "-1" is not an index`},
		{"0, 3", true, []int{0, 3}, ""},
		{"1gpu2,3", true, []int{1, 3}, ""}, // strtoul
		{"0,0", true, []int{}, "repeats a GPU"},
		{"3,8,1", true, []int{3}, `entry "8" is not one of the 8 GPUs`},
		{"GPU-a415c4c8", true, []int{3}, ""},
		{"GPU-1221b5a2-2155-a41c-2ff7-c0fcbbe8f88d,GPU-a415", true, []int{4, 3}, ""},
		{"GPU-a", true, []int{}, "matches 2 GPUs"}, // GPU2 and GPU3 share it
		{"GPU-a415c4c8,0", true, []int{3}, `entry "0" is not a GPU UUID`},
		{"GPU-a415c4c8,GPU-a415c4c8-39a4", true, []int{}, "repeats a GPU"},
	} {
		v := ResolveVisible(c.spec, c.set, gpus)
		if !reflect.DeepEqual(v.Indexes, c.want) || v.Unknown != "" {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q (set %v): indexes %v unknown %q, want %v", c.spec, c.set, v.Indexes, v.Unknown, c.want)
		}
		if (c.note == "") != (v.Note == "") || !strings.Contains(v.Note, c.note) {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q: note %q, want one containing %q", c.spec, v.Note, c.note)
		}
	}
	if v := ResolveVisible("MIG-GPU-e8d79f49-af6d-114c-4a6f-188a424e617b/1/0", true, gpus); v.Indexes != nil || !strings.Contains(v.Unknown, "MIG") {
		t.Errorf("MIG: %+v", v)
	}
	noUUID := []nvsmi.GPU{{Index: 0}, {Index: 1}}
	if v := ResolveVisible("GPU-a415", true, noUUID); v.Indexes != nil || !strings.Contains(v.Unknown, "printed none") {
		t.Errorf("UUIDs without nvidia-smi's uuid column: %+v", v)
	}
}

func errorIDs(rep *Report) []string {
	var out []string
	for _, f := range rep.Findings {
		if f.Severity == Error {
			out = append(out, f.ID)
		}
	}
	return out
}

// TestVisibleDevices is issue 13's host: 8 GPUs NVLinked in pairs
// (0,1)(2,3)(4,5)(6,7), NODE within a socket, SYS and P2P CNS across.
// Only the GPUs the job sees are judged.
func TestVisibleDevices(t *testing.T) {
	inspect := func(env []string, cmd string) *Report {
		return Inspect(context.Background(), Options{Run: recorded(t, "nvpairs8", nil), Env: env, ServerCmd: cmd})
	}
	// Two visible, NVLinked, TP 2: nothing wrong, full NVLink.
	rep := inspect([]string{"CUDA_VISIBLE_DEVICES=0,1"}, "python -m sglang.launch_server --model-path m --tp 2")
	if e := errorIDs(rep); len(e) != 0 {
		t.Errorf("CUDA_VISIBLE_DEVICES=0,1 --tp 2: errors %v", e)
	}
	if !strings.HasPrefix(rep.Verdict, "full NVLink, 2 GPUs:") || !reflect.DeepEqual(rep.Judged.GPUs, []int{0, 1}) {
		t.Errorf("verdict %q judged %v", rep.Verdict, rep.Judged.GPUs)
	}
	if _, ok := ids(rep)["topo.full-nvlink"]; !ok {
		t.Errorf("findings %+v", rep.Findings)
	}
	// TP 4 on two visible GPUs: an error naming both counts.
	rep = inspect([]string{"CUDA_VISIBLE_DEVICES=0,1"}, "python -m sglang.launch_server --model-path m --tp 4")
	f := ids(rep)["server.tp"]
	if f.Severity != Error || f.Title != "--tp (--tp-size) 4 but the job sees 2 GPUs" || !strings.Contains(f.Detail, "CUDA_VISIBLE_DEVICES=0,1: 2 visible") {
		t.Errorf("server.tp = %+v", f)
	}
	if _, ok := ids(rep)["p2p.blocked"]; ok {
		t.Errorf("P2P judged across GPUs the job cannot see: %+v", rep.Findings)
	}
	// The variable set in the server command counts as the server's.
	rep = inspect(nil, "CUDA_VISIBLE_DEVICES=4,5 python3 -m sglang.launch_server --tp-size=2")
	if !reflect.DeepEqual(rep.Judged.GPUs, []int{4, 5}) || len(errorIDs(rep)) != 0 {
		t.Errorf("judged %v errors %v", rep.Judged.GPUs, errorIDs(rep))
	}
	// Across the sockets: the blocked pairs are the visible ones, named
	// by nvidia-smi index.
	rep = inspect([]string{"CUDA_VISIBLE_DEVICES=0,1,4,5"}, "")
	f = ids(rep)["p2p.blocked"]
	if f.Severity != Error || f.Title != "P2P write is not supported between 8 GPU pairs" || !strings.Contains(f.Detail, "GPU1->GPU4: CNS") || strings.Contains(f.Detail, "GPU2") {
		t.Errorf("p2p.blocked = %+v", f)
	}
	if !strings.HasPrefix(rep.Verdict, "mixed NVLink and PCIe, 4 GPUs, NUMA-split across 2 nodes") {
		t.Errorf("verdict %q", rep.Verdict)
	}
	// All eight, TP 8: mixed, blocked.
	rep = inspect(nil, "python -m sglang.launch_server --tp 8")
	if e := errorIDs(rep); !reflect.DeepEqual(e, []string{"p2p.blocked", "p2p.blocked"}) || !strings.HasPrefix(rep.Verdict, "mixed NVLink and PCIe, 8 GPUs") {
		t.Errorf("errors %v verdict %q", e, rep.Verdict)
	}
	// TP 2 from --base-gpu-id 2 on all eight: the job uses GPUs 2 and 3.
	rep = inspect(nil, "python -m sglang.launch_server --tp 2 --base-gpu-id 2")
	if !reflect.DeepEqual(rep.Judged.GPUs, []int{2, 3}) || !strings.HasPrefix(rep.Verdict, "full NVLink, 2 GPUs") ||
		!strings.Contains(rep.Judged.Why, "TP 2 uses CUDA devices 2,3") {
		t.Errorf("judged %v (%s), verdict %q", rep.Judged.GPUs, rep.Judged.Why, rep.Verdict)
	}
	// TP 4 from --base-gpu-id 2 with step 2 needs CUDA devices 2,4,6,8: an error.
	rep = inspect(nil, "python -m sglang.launch_server --tp 4 --base-gpu-id 2 --gpu-id-step 2")
	if f := ids(rep)["server.tp"]; f.Title != "--tp (--tp-size) 4 from --base-gpu-id 2 with --gpu-id-step 2 uses CUDA devices 2,4,6,8, but only devices 0-7 are visible" {
		t.Errorf("server.tp = %+v", f)
	}
	// In CUDA order: 2,0 is GPU2 then GPU0, NODE between them.
	rep = inspect([]string{"CUDA_VISIBLE_DEVICES=2,0"}, "")
	if !reflect.DeepEqual(rep.Judged.GPUs, []int{2, 0}) || !strings.HasPrefix(rep.Verdict, "PCIe, 2 GPUs") {
		t.Errorf("judged %v verdict %q", rep.Judged.GPUs, rep.Verdict)
	}
	// One GPU: no allreduce, and no topology finding.
	rep = inspect([]string{"CUDA_VISIBLE_DEVICES=3"}, "")
	if rep.Verdict != "1 GPU (CUDA_VISIBLE_DEVICES=3: 1 visible): no allreduce between GPUs, custom allreduce is not used" || len(errorIDs(rep)) != 0 {
		t.Errorf("verdict %q errors %v", rep.Verdict, errorIDs(rep))
	}
	for _, f := range rep.Findings {
		if strings.HasPrefix(f.ID, "topo.") {
			t.Errorf("topology finding on one GPU: %+v", f)
		}
	}
	// No GPU visible.
	rep = inspect([]string{"CUDA_VISIBLE_DEVICES=-1"}, "")
	if rep.Verdict != `no GPU is visible to the job (CUDA_VISIBLE_DEVICES=-1: 0 visible (entry "-1" is not an index: CUDA sees only the entries before it))` {
		t.Errorf("verdict %q", rep.Verdict)
	}
}

// TestUnreadableFields: a vGPU row with [N/A] compute capability and
// [Not Supported] PCIe fields, and P2P status U. Nothing is concluded
// from them; the report names each.
func TestUnreadableFields(t *testing.T) {
	sgl := t.TempDir()
	if err := os.WriteFile(sgl+"/common_ops.abi3.so", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Inspect(context.Background(), Options{Run: recorded(t, "vgpu2", map[string]string{
		"python3 -c":                  sgl + "\n",
		"cuobjdump --list-elf " + sgl: "ELF file    1: common_ops.1.sm_90a.cubin\n",
	})})
	g := rep.Host.GPUs[1]
	if g.ComputeCap != "" || g.PCIeWidth != 0 || g.Name != "GRID A100D-40C" || g.MemoryMiB != 40960 ||
		!reflect.DeepEqual(g.Unreadable, []string{"compute_cap: [N/A]", "pcie.link.gen.current: [N/A]", "pcie.link.gen.max: [N/A]", "pcie.link.width.current: [Not Supported]", "pcie.link.width.max: [Not Supported]"}) {
		t.Errorf("GPU1 = %+v", g)
	}
	want := []string{
		"GPU1 compute_cap: [N/A] (nvidia-smi --query-gpu)",
		"GPU1 pcie.link.gen.current: [N/A] (nvidia-smi --query-gpu)",
		"GPU1 pcie.link.gen.max: [N/A] (nvidia-smi --query-gpu)",
		"GPU1 pcie.link.width.current: [Not Supported] (nvidia-smi --query-gpu)",
		"GPU1 pcie.link.width.max: [Not Supported] (nvidia-smi --query-gpu)",
		"P2P read GPU0->GPU1: U (nvidia-smi topo -p2p)", "P2P read GPU1->GPU0: U (nvidia-smi topo -p2p)",
		"P2P write GPU0->GPU1: U (nvidia-smi topo -p2p)", "P2P write GPU1->GPU0: U (nvidia-smi topo -p2p)",
	}
	if !reflect.DeepEqual(rep.Judged.Unreadable, want) {
		t.Errorf("unreadable:\n%q\nwant\n%q", rep.Judged.Unreadable, want)
	}
	for _, f := range rep.Findings {
		if strings.Contains(f.Title+f.Detail+f.Remedy, "[") || f.ID == "p2p.blocked" || f.ID == "sgl-kernel.arch" || strings.HasPrefix(f.ID, "gpu.") {
			t.Errorf("finding drawn from an unreadable field: %+v", f)
		}
	}
	// Only the GPU with code for it is fine: sm_90a covers the H100.
	if e := errorIDs(rep); len(e) != 0 {
		t.Errorf("errors %v", e)
	}
	// A readable GPU without code still gets its finding.
	rep = Inspect(context.Background(), Options{Run: recorded(t, "vgpu2", map[string]string{
		"python3 -c":                  sgl + "\n",
		"cuobjdump --list-elf " + sgl: "ELF file    1: common_ops.1.sm_120a.cubin\n",
	})})
	if f := ids(rep)["sgl-kernel.arch"]; f.Title != "installed sgl-kernel has no sm_90 code" || f.Remedy != "arpatch build --arch 90a and install that wheel" {
		t.Errorf("sgl-kernel.arch = %+v", f)
	}
}

// TestServerFlagsAsArgparse is issue 13's command line on a host with
// four visible GPUs: an abbreviation, two aliases, EAGLE with an EAGLE-3
// draft, and a TP above the GPU count.
func TestServerFlagsAsArgparse(t *testing.T) {
	rep := Inspect(context.Background(), Options{Run: recorded(t, "nvpairs8", nil), Env: []string{"CUDA_VISIBLE_DEVICES=0,1,2,3"},
		ServerCmd: "python -m sglang.launch_server --model-path /m/Llama-3.1-8B --speculative-algo EAGLE --speculative-draft-model /m/EAGLE3-x --tensor-parallel-size 8"})
	f := ids(rep)
	if x := f["server.eagle-vs-eagle3"]; x.Severity != Error || x.Title != "--speculative-algo (--speculative-algorithm) EAGLE with an EAGLE-3 draft model (/m/EAGLE3-x)" {
		t.Errorf("eagle-vs-eagle3 = %+v", x)
	}
	if x := f["server.tp"]; x.Severity != Error || x.Title != "--tensor-parallel-size (--tp-size) 8 but the job sees 4 GPUs" {
		t.Errorf("server.tp = %+v", x)
	}
	if x, ok := f["server.no-draft"]; ok {
		t.Errorf("false no-draft: %+v", x)
	}
	// The alias alone, with EAGLE3: no finding.
	rep = Inspect(context.Background(), Options{Run: recorded(t, "nvpairs8", nil), Env: []string{"CUDA_VISIBLE_DEVICES=0,1"},
		ServerCmd: "python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-draft-model '/m/my EAGLE3' --tp 2"})
	for _, x := range rep.Findings {
		if strings.HasPrefix(x.ID, "server.") {
			t.Errorf("alias: %+v", x)
		}
	}
	if d := rep.Judged.ServerArgs.Values["--speculative-draft-model-path"]; d != "/m/my EAGLE3" {
		t.Errorf("draft %q", d)
	}
	// An ambiguous prefix is what argparse refuses.
	rep = Inspect(context.Background(), Options{Run: recorded(t, "nvpairs8", nil),
		ServerCmd: "python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-draft /m/d"})
	if x := f2(rep, "server.args"); x.Severity != Error || !strings.HasPrefix(x.Detail, "ambiguous option: --speculative-draft could match ") {
		t.Errorf("server.args = %+v", x)
	}
}

func f2(rep *Report, id string) Finding { return ids(rep)[id] }

// TestParseArgsRules checks argparse's rules on the built-in table.
func TestParseArgsRules(t *testing.T) {
	o := BuiltinServerOptions()
	for _, c := range []struct {
		args     string
		key, val string
		problem  string
	}{
		{"--tp 4", "--tp-size", "4", ""},
		{"--tp=4", "--tp-size", "4", ""},
		{"--tensor-parallel=4", "--tp-size", "4", ""},
		{"--tp-size 2 --tp-size 8", "--tp-size", "8", ""},                             // the last wins
		{"--speculative-draft-model d", "--speculative-draft-model-path", "d", ""},    // an exact alias beats its prefixes
		{"--speculative-draft-model-p d", "--speculative-draft-model-path", "d", ""},  // a unique prefix
		{"--speculative-num-s -3", "--speculative-num-steps", "-3", ""},               // a negative number is a value
		{"--disable-custom-all-reduce --tp 8", "--disable-custom-all-reduce", "", ""}, // a flag takes no value
		{"--disable-custom-all-reduce=1", "", "", "argument --disable-custom-all-reduce=1: ignored explicit argument '1'"},
		{"--tp", "--tp-size", "", "argument --tp: expected one argument"},
		{"--speculative-n 3", "", "", "ambiguous option: --speculative-n could match --speculative-ngram-capacity"},
		{"-- --tp 8", "", "", "unrecognized arguments: --tp 8"}, // SGLang declares no positional argument
		{"--tp 2 3", "--tp-size", "2", "unrecognized arguments: 3"},
		{"m --tp 2", "--tp-size", "2", "unrecognized arguments: m"},
		{"--tensor 2", "--tp-size", "2", ""}, // a unique prefix at every commit
	} {
		r := o.Parse(strings.Fields(c.args))
		if c.key != "" {
			if v, ok := r.Values[c.key]; !ok || v != c.val {
				t.Errorf("%s: %s = %q (%v), want %q", c.args, c.key, v, ok, c.val)
			}
		}
		if c.problem == "" && len(r.Problems) > 0 || c.problem != "" && (len(r.Problems) != 1 || !strings.HasPrefix(r.Problems[0], c.problem)) {
			t.Errorf("%s: problems %q, want %q", c.args, r.Problems, c.problem)
		}
		if c.args == "-- --tp 8" && len(r.Values) != 0 {
			t.Errorf("options after --: %v", r.Values)
		}
	}
	// nargs from a tree: "*" takes every value up to the next option, 2
	// exactly two.
	tree := &ServerOptions{Complete: true, Options: []ServerOption{
		{Names: []string{"--lora-paths"}, Dest: "lora_paths", Nargs: "*"},
		{Names: []string{"--pair"}, Dest: "pair", Nargs: "2"},
		{Names: []string{"--tp-size"}, Dest: "tp_size", Nargs: "1"},
	}}
	r0 := tree.Parse([]string{"--lora-paths", "a", "b", "--pair", "x", "y", "--tp-size", "2"})
	if r0.Values["--lora-paths"] != "a b" || r0.Values["--pair"] != "x y" || r0.Values["--tp-size"] != "2" || len(r0.Problems) != 0 {
		t.Errorf("nargs: %+v", r0)
	}
	if r0 = tree.Parse([]string{"--pair", "x"}); !reflect.DeepEqual(r0.Problems, []string{"argument --pair: expected 2 arguments"}) {
		t.Errorf("nargs 2 with one value: %q", r0.Problems)
	}
	// An option none of the table's commits holds is not judged (the
	// server's SGLang may have it), and no error is raised; its value and
	// the words after it may be its own.
	r := o.Parse([]string{"--model-path", "m", "--some-future-option", "0.8", "x", "--tp", "8"})
	if !reflect.DeepEqual(r.NotJudged, []string{"--some-future-option"}) || r.Values["--tp-size"] != "8" || r.Values["--model-path"] != "m" || len(r.Problems) != 0 {
		t.Errorf("%+v", r)
	}
}

// TestParseServerArgsPy reads the option table from server_args.py files
// in upstream's two shapes (fixtures written here, shaped like
// 84118acf50b3's add_argument calls and 8905cbd42f4a's annotated
// dataclass) and parses with them.
func TestParseServerArgsPy(t *testing.T) {
	for _, c := range []struct {
		file string
		want map[string][]string // dest -> nargs, names...
	}{
		{"testdata/serverargs/calls.py", map[string][]string{
			"model_path":                       {"1", "--model-path", "--model"},
			"tensor_parallel_size":             {"1", "--tensor-parallel-size", "--tp-size"},
			"speculative_algorithm":            {"1", "--speculative-algorithm"},
			"speculative_draft_model_path":     {"1", "--speculative-draft-model-path", "--speculative-draft-model"},
			"speculative_draft_model_revision": {"1", "--speculative-draft-model-revision"},
			"disable_custom_all_reduce":        {"0", "--disable-custom-all-reduce"},
			"lora_paths":                       {"*", "--lora-paths"},
			"enable_tokenizer_batch_encode":    {"0", "--enable-tokenizer-batch-encode"},
			"tp_rank_hint":                     {"0", "--tp-rank-hint"},
		}},
		{"testdata/serverargs/dataclass.py", map[string][]string{
			"model_path":                   {"1", "--model-path", "--model"},
			"tp_size":                      {"1", "--tp-size", "--tensor-parallel-size"},
			"speculative_algorithm":        {"1", "--speculative-algorithm"},
			"speculative_draft_model_path": {"1", "--speculative-draft-model-path", "--speculative-draft-model"},
			"disable_custom_all_reduce":    {"0", "--disable-custom-all-reduce"},
			"cuda_graph_bs":                {"+", "--cuda-graph-bs"},
			"json_list":                    {"1", "--json-list"},
			"enable_piecewise":             {"0", "--enable-piecewise", "--no-enable-piecewise"},
			"draft_window":                 {"1", "--speculative-dflash-draft-window-size"},
			"stream_output":                {"0", "--stream-output"},
			"config":                       {"1", "--config"},
		}},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		o, err := ParseServerArgsPy(c.file, b)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{}
		for _, x := range o.Options {
			got[x.Dest] = append([]string{x.Nargs}, x.Names...)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n%v\nwant\n%v", c.file, got, c.want)
		}
	}
	if _, err := ParseServerArgsPy("x/server_args.py", []byte("import argparse\n")); err == nil || !strings.HasPrefix(err.Error(), "x/server_args.py: no server options found") {
		t.Errorf("err = %v", err)
	}
}

// TestTreeOptionsJudgeEverything: with a tree's complete table, an
// option it lacks is an error SGLang raises, and --tp is ambiguous where
// the tree declares a second --tp... option.
func TestTreeOptionsJudgeEverything(t *testing.T) {
	b, err := os.ReadFile("testdata/serverargs/calls.py")
	if err != nil {
		t.Fatal(err)
	}
	o, err := ParseServerArgsPy("calls.py", b)
	if err != nil {
		t.Fatal(err)
	}
	r := o.Parse([]string{"--model", "m", "--tp", "2", "--speculative-algoritm", "EAGLE3", "stray"})
	want := []string{
		"ambiguous option: --tp could match --tp-size, --tp-rank-hint",
		"unrecognized arguments: --speculative-algoritm",
		"unrecognized arguments: stray",
	}
	if !reflect.DeepEqual(r.Problems, want) || r.Values["--model-path"] != "m" {
		t.Errorf("problems %q values %v", r.Problems, r.Values)
	}
}

// TestBuiltinTableMatchesUpstream reads server_args.py at the three
// commits the built-in table names, from the SGLang history in
// $ARPATCH_SGLANG_MIRROR, and checks that the table holds exactly each
// commit's options, and that every prefix of every option string resolves
// as argparse resolves it with that commit's table: the same option or
// the same ambiguity where the commits agree, not judged where they do not.
func TestBuiltinTableMatchesUpstream(t *testing.T) {
	dir := os.Getenv("ARPATCH_SGLANG_MIRROR")
	if dir == "" {
		t.Skip("set ARPATCH_SGLANG_MIRROR to a clone or mirror of SGLang's history to check the built-in option table against it")
	}
	repo, err := gitsrc.OpenAny(dir)
	if err != nil {
		t.Fatal(err)
	}
	builtin := BuiltinServerOptions()
	var tables []*ServerOptions
	prefixes := map[string]bool{}
	for era, c := range BuiltinCommits {
		tree, err := repo.TreeAt(c)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tree.ReadFile("python/sglang/srt/server_args.py")
		if err != nil {
			t.Fatal(err)
		}
		o, err := ParseServerArgsPy(c, b)
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, o)
		want, got := map[string]string{}, map[string]string{}
		for _, x := range o.Options {
			for _, n := range x.Names {
				want[n] = x.Nargs
				for i := 3; i <= len(n); i++ {
					prefixes[n[:i]] = true
				}
			}
		}
		for _, x := range builtin.Options {
			if slices.Contains(x.In, era) {
				for _, n := range x.Names {
					got[n] = x.Nargs
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("built-in table at %s differs from upstream's options", c[:12])
		}
	}
	kind := func(problem string) string { k, _, _ := strings.Cut(problem, " "); return k }
	n := 0
	for p := range prefixes {
		var first *ServerOption
		var firstKind string
		agree := true
		for i, o := range tables {
			opt, _, _, _, problem := o.lookup(p)
			if i == 0 {
				first, firstKind = opt, kind(problem)
			} else if !sameOption(first, opt) || firstKind != kind(problem) {
				agree = false
			}
		}
		opt, _, _, known, problem := builtin.lookup(p)
		switch {
		case !agree || firstKind == "unrecognized":
			// Differs between the commits, or in none: the server's SGLang
			// decides, so the built-in table must not.
			if known {
				t.Errorf("%s: the built-in table judges it (%v, %q), but upstream differs between the commits or has no such option", p, opt, problem)
			}
		case !known || !sameOption(first, opt) || firstKind != kind(problem):
			t.Errorf("%s: upstream resolves it to %v (%s) at every commit, the built-in table to %v %q (judged %v)", p, first, firstKind, opt, problem, known)
		}
		n++
	}
	t.Logf("%d option-string prefixes checked", n)
}

// TestBuiltinPrefixes: unique prefixes resolve with the built-in table as
// with a tree's (issue 13: --tensor 2 is --tensor-parallel-size).
func TestBuiltinPrefixes(t *testing.T) {
	o := BuiltinServerOptions()
	for _, c := range []struct{ args, key, val string }{
		{"--tensor 2", "--tp-size", "2"},
		{"--tensor-p=4", "--tensor-parallel-size", "4"},
		{"--enable-dp-attention --dp 2", "--dp-size", "2"},
		{"--base-gpu 1", "--base-gpu-id", "1"},
	} {
		r := o.Parse(strings.Fields(c.args))
		if r.Values[c.key] != c.val || len(r.NotJudged) != 0 || len(r.Problems) != 0 {
			t.Errorf("%s: %s = %q, not judged %v, problems %v", c.args, c.key, r.Values[c.key], r.NotJudged, r.Problems)
		}
	}
	if r := o.Parse([]string{"--enable-dp-attention", "--dp", "2"}); r.Values["--enable-dp-attention"] != "" {
		t.Errorf("%+v", r)
	} else if _, ok := r.Values["--enable-dp-attention"]; !ok {
		t.Errorf("--enable-dp-attention not read: %+v", r)
	}
}

// TestCustomAllreduceCannotStart: the verdict and expect: follow from what
// SGLang does. At a world size custom allreduce does not support (3), and
// where a pair lacks P2P (CNS across nvpairs8's sockets), it disables
// itself: no verdict says it runs, and none prints a command to measure
// or tune it.
func TestCustomAllreduceCannotStart(t *testing.T) {
	inspect := func(run Runner, env []string, cmd string) *Report {
		return Inspect(context.Background(), Options{Run: run, Env: env, ServerCmd: cmd})
	}
	rec := recorded(t, "nvpairs8", nil)
	noCommand := func(name string, rep *Report) {
		t.Helper()
		if strings.Contains(rep.Verdict, "arpatch ") || strings.Contains(rep.Expect, "arpatch ") {
			t.Errorf("%s: a custom-allreduce command where it cannot start:\nverdict %q\nexpect %q", name, rep.Verdict, rep.Expect)
		}
		for _, f := range rep.Findings {
			if strings.Contains(f.Remedy, "arpatch bench") || strings.Contains(f.Remedy, "arpatch tune") {
				t.Errorf("%s: finding %s measures custom allreduce: %q", name, f.ID, f.Remedy)
			}
		}
	}
	// TP 3 from GPU 2: GPUs 2,3,4; world size 3 is not supported (even
	// with P2P everywhere).
	for _, run := range []Runner{rec, p2pWriteOK(t, "nvpairs8")} {
		rep := inspect(run, nil, "python -m sglang.launch_server --tp 3 --base-gpu-id 2")
		want := "mixed NVLink and PCIe, 3 GPUs, NUMA-split across 2 nodes: SGLang's custom allreduce does not run at world size 3 (it supports world sizes 2, 4, 6 and 8 and disables itself otherwise), so every allreduce goes to NCCL"
		if !reflect.DeepEqual(rep.Judged.GPUs, []int{2, 3, 4}) || !strings.HasPrefix(rep.Verdict, want) {
			t.Errorf("--tp 3: judged %v verdict %q", rep.Judged.GPUs, rep.Verdict)
		}
		noCommand("--tp 3", rep)
	}
	// GPUs 0 and 4: P2P CNS between them; world size 2 does not help.
	rep := inspect(rec, []string{"CUDA_VISIBLE_DEVICES=0,4"}, "")
	if want := "PCIe, 2 GPUs, NUMA-split across 2 nodes: P2P read is not supported between 2 GPU pairs (GPU0->GPU4: CNS), and SGLang's P2P check disables custom allreduce without it, so every allreduce goes to NCCL"; !strings.HasPrefix(rep.Verdict, want) {
		t.Errorf("0,4: verdict %q", rep.Verdict)
	}
	if !strings.Contains(rep.Expect, "custom allreduce does not start here: P2P read is not supported") {
		t.Errorf("0,4: expect %q", rep.Expect)
	}
	noCommand("0,4", rep)
	// All eight: CNS across the sockets.
	rep = inspect(rec, nil, "")
	if !strings.HasPrefix(rep.Verdict, "mixed NVLink and PCIe, 8 GPUs, NUMA-split across 2 nodes: P2P read is not supported between 32 GPU pairs") {
		t.Errorf("all 8: verdict %q", rep.Verdict)
	}
	noCommand("all 8", rep)
	// With P2P everywhere the commands come back, at the judged world size.
	rep = inspect(p2pWriteOK(t, "pcie8"), nil, "")
	if !strings.Contains(rep.Verdict, "`arpatch bench allreduce --world-size 8 --src sglang`") || !strings.Contains(rep.Expect, "`arpatch tune allreduce --world-size 8`") {
		t.Errorf("pcie8 with P2P: verdict %q expect %q", rep.Verdict, rep.Expect)
	}
	// One pair without P2P, in words.
	one := &nvsmi.P2PMatrix{GPUs: []string{"GPU0", "GPU1"}, Status: map[string][]string{"GPU0": {"X", "CNS"}, "GPU1": {"X", "X"}}}
	if got := customAROff(&Host{GPUs: []nvsmi.GPU{{Index: 0}, {Index: 1}}, P2PRead: one}); !strings.HasPrefix(got, "P2P read is not supported between 1 GPU pair (GPU0->GPU1: CNS)") {
		t.Errorf("one pair: %q", got)
	}
}

// TestTPGroups: with DP (and PP) SGLang runs several TP groups, each on
// its own GPUs (base_gpu_id + d*tp*pp*step + p*tp + t*step); doctor
// judges each alone. DP attention splits one TP group instead.
func TestTPGroups(t *testing.T) {
	inspect := func(env []string, cmd string) *Report {
		return Inspect(context.Background(), Options{Run: recorded(t, "nvpairs8", nil), Env: env, ServerCmd: cmd})
	}
	four := []string{"CUDA_VISIBLE_DEVICES=0,1,2,3"}
	for _, cmd := range []string{"--tp 2 --dp 2", "--tp 2 --dp-size 2", "--tp 2 --data-parallel-size=2", "--tp 2 --pp-size 2"} {
		rep := inspect(four, "python -m sglang.launch_server "+cmd)
		if !reflect.DeepEqual(rep.Judged.Groups, [][]int{{0, 1}, {2, 3}}) || len(rep.Groups) != 2 {
			t.Errorf("%s: groups %v (%d verdicts)", cmd, rep.Judged.Groups, len(rep.Groups))
			continue
		}
		for _, g := range rep.Groups {
			if !strings.HasPrefix(g.Verdict, "full NVLink, 2 GPUs:") {
				t.Errorf("%s: group %v verdict %q", cmd, g.GPUs, g.Verdict)
			}
		}
		if !strings.HasPrefix(rep.Verdict, "2 TP groups, judged one by one: TP group GPUs 0,1: full NVLink, 2 GPUs") || strings.Contains(rep.Verdict, "4 GPUs") || len(errorIDs(rep)) != 0 {
			t.Errorf("%s: verdict %q errors %v", cmd, rep.Verdict, errorIDs(rep))
		}
		if !strings.Contains(rep.Judged.Why, "uses CUDA devices 0,1 | 2,3 (one TP group each)") {
			t.Errorf("%s: why %q", cmd, rep.Judged.Why)
		}
	}
	// DP attention: one TP group of 4.
	rep := inspect(four, "python -m sglang.launch_server --tp 4 --dp 2 --enable-dp-attention")
	if !reflect.DeepEqual(rep.Judged.Groups, [][]int{{0, 1, 2, 3}}) || !strings.HasPrefix(rep.Verdict, "mixed NVLink and PCIe, 4 GPUs") {
		t.Errorf("dp attention: groups %v verdict %q", rep.Judged.Groups, rep.Verdict)
	}
	// DP 2 with step 2 from GPU 1 on all eight: groups at 1,3 and 5,7.
	rep = inspect(nil, "python -m sglang.launch_server --tp 2 --dp 2 --base-gpu-id 1 --gpu-id-step 2")
	if !reflect.DeepEqual(rep.Judged.Groups, [][]int{{1, 3}, {5, 7}}) {
		t.Errorf("step 2: groups %v", rep.Judged.Groups)
	}
	// TP 2 x DP 2 on two GPUs: too few, said in those terms.
	rep = inspect([]string{"CUDA_VISIBLE_DEVICES=0,1"}, "python -m sglang.launch_server --tp 2 --dp 2")
	if f := ids(rep)["server.tp"]; f.Title != "TP 2 x DP 2 but the job sees 2 GPUs" || f.Remedy != "lower --tp-size to at most 1, or make more GPUs visible (CUDA_VISIBLE_DEVICES)" {
		t.Errorf("dp on 2: %+v", f)
	}
	// P2P blocked between the groups does not matter: 0,1 and 4,5.
	rep = inspect([]string{"CUDA_VISIBLE_DEVICES=0,1,4,5"}, "python -m sglang.launch_server --tp 2 --dp 2")
	if _, ok := ids(rep)["p2p.blocked"]; ok {
		t.Errorf("P2P judged between TP groups: %+v", rep.Findings)
	}
}

// TestVisibleNone: a CUDA_VISIBLE_DEVICES that leaves no GPU is an error
// whose remedy fixes the variable; one doctor cannot map is said so.
func TestVisibleNone(t *testing.T) {
	inspect := func(spec, cmd string) *Report {
		return Inspect(context.Background(), Options{Run: recorded(t, "nvpairs8", nil), Env: []string{"CUDA_VISIBLE_DEVICES=" + spec}, ServerCmd: cmd})
	}
	for _, spec := range []string{"", "0,0", "-1", "abc", "GPU-a"} {
		for _, cmd := range []string{"", "python -m sglang.launch_server --tp 2"} {
			rep := inspect(spec, cmd)
			f := ids(rep)["visible.none"]
			if f.Severity != Error || !strings.Contains(f.Remedy, "set CUDA_VISIBLE_DEVICES to GPU indexes nvidia-smi lists (0,1,2,3,4,5,6,7)") {
				t.Errorf("CUDA_VISIBLE_DEVICES=%q %q: visible.none = %+v", spec, cmd, f)
			}
			if _, ok := ids(rep)["server.tp"]; ok {
				t.Errorf("CUDA_VISIBLE_DEVICES=%q: server.tp with no GPU visible: %+v", spec, ids(rep)["server.tp"])
			}
		}
	}
	rep := inspect("MIG-GPU-e8d79f49-af6d-114c-4a6f-188a424e617b/1/0", "python -m sglang.launch_server --tp 2")
	if f := ids(rep)["visible.unknown"]; f.Severity != Error || !strings.Contains(f.Detail, "MIG") || f.Remedy == "" {
		t.Errorf("MIG: %+v", rep.Findings)
	}
}

// TestRefusedValues: values SGLang's parser or its checks refuse are
// errors naming the reason.
func TestRefusedValues(t *testing.T) {
	for cmd, want := range map[string]string{
		"--tp-size abc":       "argument --tp-size: invalid int value: 'abc'",
		"--tp 0":              "--tp 0: SGLang launches no TP rank with fewer than 1",
		"--tp 2 -- extra":     "unrecognized arguments: extra (after --)",
		"--base-gpu-id=-1":    "--base-gpu-id -1: base_gpu_id must be non-negative",
		"--base-gpu-id -1":    "--base-gpu-id -1: base_gpu_id must be non-negative",
		"--gpu-id-step 0":     "--gpu-id-step 0: gpu_id_step must be positive",
		"--dp-size x --tp 2":  "argument --dp-size: invalid int value: 'x'",
		"--tp 2 stray":        "unrecognized arguments: stray",
		"--tensor-parallel 0": "--tensor-parallel 0: SGLang launches no TP rank",
	} {
		rep := Inspect(context.Background(), Options{Run: recorded(t, "nvpairs8", nil), ServerCmd: "python -m sglang.launch_server " + cmd})
		if f := ids(rep)["server.args"]; f.Severity != Error || !strings.Contains(f.Detail, want) {
			t.Errorf("%s: server.args = %+v, want detail with %q", cmd, f, want)
		}
	}
}

// TestBaseGPUWording: 0-based devices in the server.tp finding.
func TestBaseGPUWording(t *testing.T) {
	rep := Inspect(context.Background(), Options{Run: recorded(t, "nvpairs8", nil), Env: []string{"CUDA_VISIBLE_DEVICES=0,1,2,3"}, ServerCmd: "python -m sglang.launch_server --base-gpu-id 3 --tp 2"})
	f := ids(rep)["server.tp"]
	if f.Title != "--tp (--tp-size) 2 from --base-gpu-id 3 uses CUDA devices 3,4, but only devices 0-3 are visible" || !strings.Contains(f.Detail, "CUDA device 4 does not exist for the job") {
		t.Errorf("server.tp = %+v", f)
	}
}

// TestNUMAUnreadable: a NUMA Affinity nvidia-smi prints as N/A is listed
// under unreadable, as the README says every unreadable value is, and
// draws no NUMA-split finding.
func TestNUMAUnreadable(t *testing.T) {
	topo := "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tPHB\t0-15\tN/A\t\tN/A\nGPU1\tPHB\t X \t0-15\t0\t\tN/A\n"
	rec := recorded(t, "vgpu2", nil)
	run := func(ctx context.Context, name string, args ...string) (string, error) {
		if name == "nvidia-smi" && strings.Join(args, " ") == "topo -m" {
			return topo, nil
		}
		return rec(ctx, name, args...)
	}
	rep := Inspect(context.Background(), Options{Run: run})
	if !slices.Contains(rep.Judged.Unreadable, "GPU0 NUMA Affinity: N/A (nvidia-smi topo -m)") || slices.ContainsFunc(rep.Judged.Unreadable, func(s string) bool { return strings.HasPrefix(s, "GPU1 NUMA") }) {
		t.Errorf("unreadable %q", rep.Judged.Unreadable)
	}
	if _, ok := ids(rep)["topo.numa-split"]; ok {
		t.Errorf("NUMA split from an unreadable affinity: %+v", rep.Findings)
	}
}
