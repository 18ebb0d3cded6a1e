package tune_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/doctor"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/traffic"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/patches/kernelsim"
	"github.com/arpatch/arpatch/patches/seriessim"
)

// printed is one environment arpatch prints for a user to set, at the
// world size it is for.
type printed struct {
	what string
	ws   int
	env  []string // VAR=value, as printed
}

// modelHosts are the traffic model's hosts the printed schedules come
// from: the reference host, FlashInfer's, the recorded hosts (with their
// nvidia-smi records, for doctor) and matrices of 2 to 8 GPUs on one
// switch and on two sockets.
func modelHosts(t *testing.T) (map[string]*traffic.Topology, map[string][2]any) {
	t.Helper()
	p := traffic.Default()
	hosts := map[string]*traffic.Topology{"reference": traffic.RefHost(p)}
	records := map[string][2]any{} // name -> {[]nvsmi.GPU, *nvsmi.Topology}
	dirs, _ := filepath.Glob("../doctor/testdata/*/topo-m.txt")
	dirs = append(dirs, "../traffic/testdata/switch4/topo-m.txt")
	for _, f := range dirs {
		dir := filepath.Dir(f)
		tb, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		qb, err := os.ReadFile(filepath.Join(dir, "query-gpu.csv"))
		if err != nil {
			t.Fatal(err)
		}
		topo, err1 := nvsmi.ParseTopoMatrix(string(tb))
		gpus, err2 := nvsmi.ParseQueryGPU(string(qb))
		if err1 != nil || err2 != nil {
			continue // a malformed record, which doctor refuses
		}
		m, err := traffic.FromNVSMI(topo, gpus, p)
		if err != nil {
			continue
		}
		name := filepath.Base(dir)
		hosts[name], records[name] = m, [2]any{gpus, topo}
	}
	matrix := func(n int, class func(i, j int) string) *traffic.Topology {
		l := make([][]string, n)
		for i := range l {
			l[i] = make([]string, n)
			for j := range l[i] {
				l[i][j] = "X"
				if i != j {
					l[i][j] = class(i, j)
				}
			}
		}
		m, err := traffic.New(l, nil, nil, p)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, n := range []int{2, 4, 6, 8} {
		hosts[fmt.Sprintf("%d GPUs on one switch", n)] = matrix(n, func(int, int) string { return "PIX" })
		hosts[fmt.Sprintf("%d GPUs on two sockets", n)] = matrix(n, func(i, j int) string {
			if i < n/2 == (j < n/2) {
				return "NODE"
			}
			return "SYS"
		})
	}
	hosts["flashinfer"] = matrix(8, func(i, j int) string {
		if i/4 == j/4 {
			return "NODE"
		}
		return "SYS"
	})
	return hosts, records
}

// runEnv is the environment doctor's expect: line says runs the schedule
// ("to run it: VAR=value ...;").
var runEnv = regexp.MustCompile(`to run it: ([^;]*);`)

// gatherPrinted is every environment arpatch prints for a user to set:
// the traffic model's suggestion (doctor's expect:, tune's model line) on
// every model host, with the calibrated constants and with each constant
// the docs vary, against NCCL over P2P and over SHM; doctor's expect:
// line itself on the recorded hosts; tune's choice (Pick) from results the
// model gives on every host and from the recorded H200 tunes; and the
// example schedule help and messages give, at every world size.
func gatherPrinted(t *testing.T) []printed {
	t.Helper()
	hosts, records := modelHosts(t)
	var out []printed
	variants := map[string]func(*traffic.Params){
		"calibrated":      func(*traffic.Params) {},
		"barrier 2.0 µs":  func(p *traffic.Params) { p.BarrierUS = 2.0 },
		"barrier 0.36 µs": func(p *traffic.Params) { p.BarrierUS = 0.36 },
		"no asymmetry": func(p *traffic.Params) {
			p.RootComplexReadGBps = p.RootComplexWriteGBps
			p.ReadRound4US, p.ReadRound8US = p.BarrierUS, p.BarrierUS
		},
		"half the RC":      func(p *traffic.Params) { p.RootComplexWriteGBps /= 2 },
		"copy-engine rate": func(p *traffic.Params) { p.KernelStoreEfficiency = 1 },
	}
	for name, m := range hosts {
		if m.FullNVLink() {
			continue // the PCIe dispatch does not run there; doctor prints no schedule
		}
		for vname, set := range variants {
			p := traffic.Default()
			set(&p)
			for _, shm := range []bool{false, true} {
				s := m.Suggest(p, shm)
				out = append(out, printed{fmt.Sprintf("model on %s (%s, shm %v)", name, vname, shm), m.N, s.Env()})
			}
		}
		// tune's choice from results the model gives, each algorithm only
		// at the sizes its scratch holds (bench allreduce runs no other).
		p := traffic.Default()
		var results []allreduce.Result
		sizes := tune.ServingSizes(allreduce.VerifyHidden, allreduce.VerifyTokens)
		var islands *traffic.IslandChoice
		if cs := m.IslandChoices(); len(cs) > 0 {
			islands = &cs[0]
		}
		for _, n := range sizes {
			results = append(results, allreduce.Result{Impl: allreduce.NCCL, Branch: "-", Bytes: n, Mode: allreduce.ModeGraph, OK: true, MedianUS: m.NCCL(n, p, false).US})
			for _, impl := range traffic.Custom {
				e := m.Estimate(impl, n, p)
				r := allreduce.Result{Impl: impl, Branch: "pcie", Bytes: n, Mode: allreduce.ModeGraph, OK: true, MedianUS: e.US}
				if impl == traffic.CustomIsland {
					if islands == nil {
						continue
					}
					e = m.EstimateIslands(*islands, n, p)
					r.MedianUS, r.Islands = e.US, islands.Islands.String()
				}
				if impl != traffic.Custom1Stage && impl != traffic.Custom2Stage && !e.Fits {
					continue
				}
				results = append(results, r)
			}
		}
		th, _, _, err := tune.Pick(results, m.N, allreduce.ModeGraph, m.FullNVLink())
		if err != nil {
			t.Fatalf("%s: Pick: %v", name, err)
		}
		out = append(out, printed{"tune's choice from the model on " + name, m.N, th.Env()})
	}
	for name, r := range records {
		gpus, topo := r[0].([]nvsmi.GPU), r[1].(*nvsmi.Topology)
		line := doctor.ModelExpectation(gpus, topo, nil, "")
		if mm := runEnv.FindStringSubmatch(line); mm != nil {
			out = append(out, printed{"doctor's expect: on " + name, len(gpus), strings.Fields(mm[1])})
		}
	}
	for _, era := range []string{"A", "B", "C"} {
		path := "testdata/h200x2-ws2-" + era + ".json"
		o := loadOutcomeFile(t, path)
		th, _, _, err := tune.Pick(o.Measure.Run.Results, 2, allreduce.ModeGraph, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, printed{"tune's choice from " + path, 2, th.Env()})
	}
	for _, ws := range []int{2, 4, 6, 8} {
		out = append(out, printed{"the example schedule", ws, []string{tune.EnvForce + "=1", tune.EnvSchedule + "=" + tune.ExampleSchedule}})
	}
	return out
}

// cut is the cut an environment sets: SGLANG_PCIE_CUSTOM_AR_MAX_BYTES,
// or 0002's default, at most the 8 MiB of max_size.
func cut(env map[string]string) uint64 {
	c := uint64(tune.DefaultMaxBytes)
	if v, ok := env[tune.EnvMaxBytes]; ok {
		c, _ = strconv.ParseUint(v, 10, 64)
	}
	return min(c, tune.UpstreamMaxSize)
}

// probeSizes are the sizes to ask the kernel about up to c: powers of two,
// every step's bound and the pack after it, and c.
func probeSizes(env map[string]string, c uint64) []uint64 {
	var sizes []uint64
	for n := uint64(16); n <= c; n *= 2 {
		sizes = append(sizes, n)
	}
	if s, err := tune.ParseSchedule(env[tune.EnvSchedule]); err == nil {
		for _, st := range s {
			if !st.Last && st.MaxBytes <= c {
				sizes = append(sizes, st.MaxBytes, st.MaxBytes+16)
			}
		}
	}
	if c >= 16 {
		sizes = append(sizes, c/16*16)
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// shippedSeries returns the shipped series, python3 and a C++ driver for
// each, skipping what this host cannot run.
func shippedSeries(t *testing.T) ([]*seriessim.Series, string, []*kernelsim.Sim) {
	t.Helper()
	ss, err := seriessim.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	py, err := seriessim.Python3()
	if err != nil {
		t.Skipf("python3 not found (%v): the series' Python is not run here", err)
	}
	dir := t.TempDir()
	var sims []*kernelsim.Sim
	for _, s := range ss {
		src := s.CXX
		src.Narrow = true // parse only: no kernel runs
		sim, err := kernelsim.Build(context.Background(), dir, src)
		if errors.Is(err, kernelsim.ErrNoCompiler) {
			t.Skipf("%v: the series' C++ is not run here", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		sims = append(sims, sim)
	}
	return ss, py, sims
}

// TestPrintedSchedulesAccepted: every environment arpatch prints for a
// user to set (gatherPrinted) is taken, exactly as printed, by every
// shipped era's series: 0002's CustomAllreduce.__init__ lines under
// python3 raise nothing, and 0001's C++ (CustomAllreduce at init, then
// pcie_algo_for at every size up to the cut) throws nothing; and arpatch's
// own mirror of 0002's check (Thresholds.SeriesError) agrees.
func TestPrintedSchedulesAccepted(t *testing.T) {
	ss, py, sims := shippedSeries(t)
	all := gatherPrinted(t)
	if len(all) < 100 {
		t.Fatalf("only %d printed environments gathered", len(all))
	}
	withSteps := 0
	ctx := context.Background()
	for i, s := range ss {
		var cases []seriessim.Init
		for _, pr := range all {
			env := map[string]string{}
			for _, kv := range pr.env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			cases = append(cases, seriessim.Init{Env: env, WorldSize: pr.ws})
		}
		res, err := s.Construct(ctx, py, cases)
		if err != nil {
			t.Fatal(err)
		}
		for j, pr := range all {
			env := cases[j].Env
			what := fmt.Sprintf("%s: %s at world size %d: %s", s.Name, pr.what, pr.ws, strings.Join(pr.env, " "))
			if res[j].Error != "" {
				t.Errorf("%s: 0002 refuses it at init: %s", what, res[j].Error)
				continue
			}
			if !res[j].Forced {
				t.Errorf("%s: the gate stays closed", what)
			}
			th, err := tune.FromEnv(env)
			if err == nil {
				err = th.SeriesError(pr.ws)
			}
			if err != nil {
				t.Errorf("%s: arpatch's own check refuses it: %v", what, err)
			}
			if strings.Contains(env[tune.EnvSchedule], ":") {
				withSteps++
			}
			c := cut(env)
			p, err := sims[i].Parse(ctx, pr.ws, tune.UpstreamMaxSize, env, probeSizes(env, c)...)
			if err != nil {
				t.Fatal(err)
			}
			if p.Error != "" {
				t.Errorf("%s: 0001 throws at init_custom_ar: %s", what, p.Error)
				continue
			}
			for k, a := range p.Algos {
				if strings.HasPrefix(a, "error: ") {
					t.Errorf("%s: 0001 throws at %d bytes (up to the cut %d): %s", what, probeSizes(env, c)[k], c, a)
					break
				}
			}
		}
	}
	if withSteps == 0 {
		t.Error("no printed schedule has a bounded step")
	}
}

// TestSeriesErrorIsTheSeries: arpatch's mirror of 0002's init check
// (Thresholds.SeriesError) refuses exactly what every era's 0002 refuses,
// over schedules that fit and do not fit the scratch at world sizes 2 to
// 8, with and without islands, at several cuts.
func TestSeriesErrorIsTheSeries(t *testing.T) {
	ss, py, _ := shippedSeries(t)
	type tc struct {
		env map[string]string
		ws  int
	}
	var cases []tc
	islands := map[int][]string{2: {"", "0/1"}, 4: {"", "0,1/2,3"}, 6: {"", "0,1,2/3,4,5", "0,1/2,3/4,5"}, 8: {"", "0,1,2,3/4,5,6,7", "0,1/2,3/4,5/6,7"}}
	for _, sched := range []string{"push1", "push2", "island", "pull1", "pull2", tune.ExampleSchedule,
		"push1:5824,island:3355424,push2", "push1:5824,island:3355440,push2", "push1:5824,island", "push1:1048576,push2",
		"push1:1048592,push2", "push2:4194304,pull2", "push2:4194272,pull2", "push1:4194304,pull1", "pull1:4096,pull2"} {
		for _, c := range []string{"0", "65536", "1048576", "3355424", "4194304", "8388608", "16777216"} {
			for ws, lays := range islands {
				for _, is := range lays {
					env := map[string]string{tune.EnvForce: "1", tune.EnvSchedule: sched, tune.EnvMaxBytes: c}
					if is != "" {
						env[tune.EnvIslands] = is
					}
					cases = append(cases, tc{env, ws})
				}
			}
		}
	}
	refused := 0
	for _, s := range ss {
		var in []seriessim.Init
		for _, c := range cases {
			in = append(in, seriessim.Init{Env: c.env, WorldSize: c.ws})
		}
		res, err := s.Construct(context.Background(), py, in)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cases {
			th, err := tune.FromEnv(c.env)
			if err != nil {
				t.Fatalf("%v: %v", c.env, err)
			}
			goErr := th.SeriesError(c.ws)
			if (goErr != nil) != (res[i].Error != "") {
				t.Errorf("%s: %v at world size %d: arpatch says %v, the series %q", s.Name, c.env, c.ws, goErr, res[i].Error)
			}
			if goErr != nil {
				refused++
				if !strings.HasPrefix(goErr.Error(), tune.EnvSchedule+": ") {
					t.Errorf("%v: %v does not name %s first", c.env, goErr, tune.EnvSchedule)
				}
			}
		}
	}
	if refused == 0 {
		t.Error("no case refused: the grid tests nothing")
	}
}

func loadOutcomeFile(t *testing.T, path string) *tune.Outcome {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var o tune.Outcome
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return &o
}
