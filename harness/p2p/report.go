package p2p

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
	"github.com/arpatch/arpatch/harness/nvsmi"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/internal/torchrun"
)

// Schema names the JSON layout of a Report.
const Schema = "arpatch.bench.p2p/v1"

// CorruptText is what a pair whose bytes came back wrong is called, in
// its finding and in the verdict.
const CorruptText = "P2P reports OK but corrupts data"

// Figure is the median of a case's samples with their range.
type Figure struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// figureOf summarizes xs; nil for none.
func figureOf(xs []float64) *Figure {
	if len(xs) == 0 {
		return nil
	}
	return &Figure{Median: stats.Quantile(xs, 0.5), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// Rate is a bandwidth at one transfer size, GB/s (1e9 bytes/s).
type Rate struct {
	Bytes int    `json:"bytes"`
	GBps  Figure `json:"gbps"`
}

// Pair is what was measured between two GPUs, one direction: GPU's kernel
// loading from (Read) or storing to (Write) Peer's memory, alone on the
// host. GPU and Peer are nvidia-smi indexes.
type Pair struct {
	GPU   int    `json:"gpu"`
	Peer  int    `json:"peer"`
	Link  Link   `json:"link"`
	Read  []Rate `json:"read,omitempty"`
	Write []Rate `json:"write,omitempty"`
	// FlagRTTUS is a round trip of flags between the two (each stores into
	// the other's memory and polls its own), µs; ReadLatencyUS one
	// dependent load from Peer's memory, µs.
	FlagRTTUS     *Figure `json:"flag_rtt_us,omitempty"`
	ReadLatencyUS *Figure `json:"read_latency_us,omitempty"`
	// Slow names each rate far below the link (SlowFraction).
	Slow []string `json:"slow,omitempty"`
}

// HostLinkReport is a GPU's link to pinned host memory, measured with that
// GPU alone: its kernel's loads and stores through the mapping, one
// stream, and one dependent load.
type HostLinkReport struct {
	GPU           int      `json:"gpu"`
	Link          Link     `json:"link"`
	Load          []Rate   `json:"load,omitempty"`
	Store         []Rate   `json:"store,omitempty"`
	ReadLatencyUS *Figure  `json:"read_latency_us,omitempty"`
	Slow          []string `json:"slow,omitempty"`
}

// PatternReport is one all-to-all pattern: every GPU of the group loading
// from (Op OpRead, as custom 1-stage pulls) or storing to (OpWrite, as a
// push does) every other at once, BytesPerPeer each; or making dependent
// loads from every other at once (OpReadLatency: a round of P2P reads
// under all-to-all load, what harness/traffic's ReadRound constants are).
type PatternReport struct {
	Name         string `json:"name"` // "socket GPU0-GPU3"
	Kind         string `json:"kind"` // KindSwitch, ...
	GPUs         []int  `json:"gpus"`
	Op           string `json:"op"`
	BytesPerPeer int    `json:"bytes_per_peer"`
	// PerGPUGBps is what each GPU moves to or from its peers together,
	// (n-1) x BytesPerPeer / its kernel's time, over every GPU and rep;
	// AggregateGBps is the group's total over the slowest GPU's time,
	// per rep.
	PerGPUGBps    *Figure `json:"per_gpu_gbps,omitempty"`
	AggregateGBps *Figure `json:"aggregate_gbps,omitempty"`
	// RoundUS is OpReadLatency's round, µs, over every GPU and rep.
	RoundUS *Figure `json:"round_us,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// Corruption is a check that found bytes wrong.
type Corruption struct {
	Test         string    `json:"test"`
	Op           string    `json:"op"`
	Pattern      string    `json:"pattern,omitempty"`
	GPU          int       `json:"gpu"`  // whose kernel moved the bytes
	Peer         int       `json:"peer"` // whose memory; HostPeer for pinned host memory
	Link         string    `json:"link"`
	Bytes        int       `json:"bytes,omitempty"`
	BadWords     int64     `json:"bad_words"`
	CheckedBytes int64     `json:"checked_bytes"`
	FirstBad     *Mismatch `json:"first_bad,omitempty"`
	// CPU is what the CPU found in pinned host memory the GPU wrote,
	// when that was wrong.
	CPU string `json:"cpu,omitempty"`
}

// Severity of a finding.
type Severity string

const (
	Error Severity = "error"
	Warn  Severity = "warn"
	Info  Severity = "info"
)

// Finding is one thing the report concludes.
type Finding struct {
	ID       string   `json:"id"` // "p2p.corrupt", "p2p.slow", ...
	Severity Severity `json:"severity"`
	Text     string   `json:"text"`
}

// Report is the JSON document of `arpatch bench p2p --json`.
type Report struct {
	Schema         string    `json:"schema"`
	CreatedAt      time.Time `json:"created_at"`
	ArpatchVersion string    `json:"arpatch_version"`
	// Command is the arpatch command line that made it.
	Command string `json:"command,omitempty"`
	Host    struct {
		Name string      `json:"name,omitempty"`
		GPUs []nvsmi.GPU `json:"gpus"` // the GPUs measured, in rank order
		// Topology is nvidia-smi topo -m among them.
		Topology *nvsmi.Topology `json:"topology,omitempty"`
	} `json:"host"`
	Options struct {
		Sizes        []int `json:"sizes"`
		PatternBytes int   `json:"pattern_bytes"`
		Reps         int   `json:"reps"`
	} `json:"options"`
	Run       *Run             `json:"run"`
	Pairs     []Pair           `json:"pairs,omitempty"`
	HostLinks []HostLinkReport `json:"host_links,omitempty"`
	Patterns  []PatternReport  `json:"patterns,omitempty"`
	Corrupt   []Corruption     `json:"corrupt,omitempty"`
	// Unmeasured says what this host cannot measure and why.
	Unmeasured []string  `json:"unmeasured,omitempty"`
	Findings   []Finding `json:"findings"`
	Verdict    string    `json:"verdict"`
}

// NewReport builds the report of run, made with o (its GPUs label the
// ranks with their nvidia-smi indexes).
func NewReport(o Options, run *Run, version string) *Report {
	o = o.resolved()
	rep := &Report{Schema: Schema, CreatedAt: time.Now().UTC(), ArpatchVersion: version, Run: run}
	rep.Host.GPUs, rep.Host.Topology = o.GPUs, o.Topology
	rep.Options.Sizes, rep.Options.PatternBytes, rep.Options.Reps = o.Sizes, o.PatternBytes, o.Reps
	b := builder{o: o, rep: rep, pairs: map[[2]int]*Pair{}, hosts: map[int]*HostLinkReport{}}
	b.ranks()
	for _, r := range run.Results {
		b.add(r)
	}
	b.finish()
	return rep
}

// builder turns results, in rank terms, into the report's GPU terms.
type builder struct {
	o     Options
	rep   *Report
	pairs map[[2]int]*Pair
	hosts map[int]*HostLinkReport
}

// gpu is rank r's nvidia-smi index.
func (b *builder) gpu(r int) int {
	if r >= 0 && r < len(b.o.GPUs) {
		return b.o.GPUs[r].Index
	}
	return r
}

func (b *builder) name(r int) string {
	if r == HostPeer {
		return "host memory"
	}
	return "GPU" + strconv.Itoa(b.gpu(r))
}

func (b *builder) find(id string, sev Severity, format string, args ...any) {
	b.rep.Findings = append(b.rep.Findings, Finding{ID: id, Severity: sev, Text: fmt.Sprintf(format, args...)})
}

// ranks checks that each rank ran on the GPU it was meant to.
func (b *builder) ranks() {
	e := b.rep.Run.Env
	if e == nil {
		return
	}
	for r, ri := range e.Ranks {
		if ri.SelfCheck != "" {
			b.find("p2p.self-check", Error, "rank %d (%s): the probe's self-check failed, so nothing it measured could be trusted: %s", r, b.name(r), ri.SelfCheck)
		}
		if r < len(b.o.GPUs) && ri.BusID != "" && nvsmi.BusID(ri.BusID) != nvsmi.BusID(b.o.GPUs[r].BusID) {
			b.find("p2p.rank-order", Error, "rank %d ran on the GPU at bus %s, not on GPU%d (%s): CUDA numbers the GPUs otherwise than nvidia-smi here, so the labels below are wrong; run with CUDA_DEVICE_ORDER=PCI_BUS_ID",
				r, ri.BusID, b.o.GPUs[r].Index, b.o.GPUs[r].BusID)
		}
	}
}

func (b *builder) pair(r, p int) *Pair {
	k := [2]int{r, p}
	if b.pairs[k] == nil {
		b.pairs[k] = &Pair{GPU: b.gpu(r), Peer: b.gpu(p), Link: PairLink(b.o.Topology, b.o.GPUs, r, p)}
	}
	return b.pairs[k]
}

func (b *builder) host(r int) *HostLinkReport {
	if b.hosts[r] == nil {
		h := &HostLinkReport{GPU: b.gpu(r), Link: Link{Kind: "PCIe", Label: "PCIe, unknown"}}
		if r < len(b.o.GPUs) {
			h.Link = HostLink(b.o.GPUs[r])
		}
		b.hosts[r] = h
	}
	return b.hosts[r]
}

// linkOf names the path of a check.
func (b *builder) linkOf(r, p int) string {
	if p == HostPeer {
		return b.host(r).Link.Label
	}
	return b.pair(r, p).Link.Label
}

// caseName says which case a result is, in GPU terms.
func (b *builder) caseName(r Result) string {
	switch r.Test {
	case TestPattern:
		if r.Op == OpReadLatency {
			return fmt.Sprintf("all-to-all dependent loads, %s", b.patternName(r))
		}
		return fmt.Sprintf("all-to-all %s, %s (%s per peer)", r.Op, b.patternName(r), allreduce.FormatBytes(r.Bytes))
	case TestHost:
		return fmt.Sprintf("%s's %ss, pinned host memory, %s", b.name(r.Rank), r.Op, allreduce.FormatBytes(r.Bytes))
	case TestLatency:
		if r.Op == OpHostRead {
			return b.name(r.Rank) + "'s dependent loads from pinned host memory"
		}
		if r.Op == OpFlagRTT {
			return fmt.Sprintf("flag round trip %s <-> %s", b.name(r.Rank), b.name(r.Peer))
		}
		return fmt.Sprintf("%s's dependent loads from %s", b.name(r.Rank), b.name(r.Peer))
	case TestIPC:
		return fmt.Sprintf("%s mapping %s's memory (cuIpcOpenMemHandle)", b.name(r.Rank), b.name(r.Peer))
	}
	what := "reads from"
	if r.Op == OpWrite {
		what = "writes to"
	}
	return fmt.Sprintf("%s %s %s, %s", b.name(r.Rank), what, b.name(r.Peer), allreduce.FormatBytes(r.Bytes))
}

func (b *builder) patternName(r Result) string {
	for _, p := range Patterns(b.o.Topology, len(b.o.GPUs)) {
		if slices.Equal(p.Ranks, r.Ranks) {
			return p.Name
		}
	}
	return r.Name
}

func (b *builder) add(r Result) {
	for _, c := range r.Checks {
		if c.BadWords > 0 {
			pat := ""
			if r.Test == TestPattern {
				pat = b.patternName(r)
			}
			b.rep.Corrupt = append(b.rep.Corrupt, Corruption{Test: r.Test, Op: r.Op, Pattern: pat, GPU: b.gpu(c.Rank), Peer: peerIndex(b, c.Peer),
				Link: b.linkOf(c.Rank, c.Peer), Bytes: r.Bytes, BadWords: c.BadWords, CheckedBytes: c.CheckedBytes, FirstBad: c.FirstBad})
		}
	}
	if r.CPUCheck != "" && r.CPUCheck != "ok" {
		b.rep.Corrupt = append(b.rep.Corrupt, Corruption{Test: r.Test, Op: r.Op, GPU: b.gpu(r.Rank), Peer: HostPeer, Link: b.linkOf(r.Rank, HostPeer), Bytes: r.Bytes, CPU: r.CPUCheck})
	}
	if r.Error != "" {
		id := "p2p.error"
		if r.Test == TestIPC {
			id = "p2p.ipc"
		}
		b.find(id, Error, "%s: %s", b.caseName(r), r.Error)
		if r.Test == TestPair || r.Test == TestIPC || (r.Test == TestLatency && r.Op != OpHostRead) {
			b.pair(r.Rank, r.Peer) // listed, with its link, though nothing was measured
		}
		return
	}
	switch r.Test {
	case TestHost:
		h := b.host(r.Rank)
		rate := rateOf(r)
		if r.Op == OpLoad {
			h.Load = append(h.Load, rate)
		} else {
			h.Store = append(h.Store, rate)
		}
	case TestPair:
		p := b.pair(r.Rank, r.Peer)
		if r.Op == OpRead {
			p.Read = append(p.Read, rateOf(r))
		} else {
			p.Write = append(p.Write, rateOf(r))
		}
	case TestLatency:
		f := figureOf(r.SamplesUS)
		switch r.Op {
		case OpHostRead:
			b.host(r.Rank).ReadLatencyUS = f
		case OpFlagRTT:
			b.pair(r.Rank, r.Peer).FlagRTTUS = f
			b.pair(r.Peer, r.Rank).FlagRTTUS = f
		case OpRead:
			b.pair(r.Rank, r.Peer).ReadLatencyUS = f
		}
	case TestPattern:
		b.pattern(r)
	}
}

func peerIndex(b *builder, p int) int {
	if p == HostPeer {
		return HostPeer
	}
	return b.gpu(p)
}

func rateOf(r Result) Rate {
	f := figureOf(r.SamplesGBps)
	if f == nil {
		f = &Figure{}
	}
	return Rate{Bytes: r.Bytes, GBps: *f}
}

// pattern adds an all-to-all result: per GPU, (n-1) x bytes over its time
// in each rep; per rep, the group's bytes over the slowest GPU's time.
func (b *builder) pattern(r Result) {
	pr := PatternReport{Name: b.patternName(r), Op: r.Op, BytesPerPeer: r.Bytes}
	for _, p := range Patterns(b.o.Topology, len(b.o.GPUs)) {
		if slices.Equal(p.Ranks, r.Ranks) {
			pr.Kind = p.Kind
		}
	}
	for _, x := range r.Ranks {
		pr.GPUs = append(pr.GPUs, b.gpu(x))
	}
	if r.Op == OpReadLatency {
		var us []float64
		for _, x := range r.Ranks {
			us = append(us, r.PerRankUS[strconv.Itoa(x)]...)
		}
		pr.RoundUS = figureOf(us)
		b.rep.Patterns = append(b.rep.Patterns, pr)
		return
	}
	moved := float64(len(r.Ranks)-1) * float64(r.Bytes)
	var per, agg []float64
	slowest := map[int]float64{}
	for _, x := range r.Ranks {
		for k, us := range r.PerRankUS[strconv.Itoa(x)] {
			if us > 0 {
				per = append(per, moved/(us*1e3))
			}
			slowest[k] = max(slowest[k], us)
		}
	}
	for k := range len(slowest) {
		if us := slowest[k]; us > 0 {
			agg = append(agg, float64(len(r.Ranks))*moved/(us*1e3))
		}
	}
	pr.PerGPUGBps, pr.AggregateGBps = figureOf(per), figureOf(agg)
	b.rep.Patterns = append(b.rep.Patterns, pr)
}

// finish orders what was built and draws the findings and the verdict.
func (b *builder) finish() {
	rep, run := b.rep, b.rep.Run
	for _, k := range slices.SortedFunc(maps.Keys(b.pairs), func(x, y [2]int) int { return cmp.Or(x[0]-y[0], x[1]-y[1]) }) {
		p := b.pairs[k]
		p.Slow = slowRates(p.Link, map[string][]Rate{"read": p.Read, "write": p.Write})
		rep.Pairs = append(rep.Pairs, *p)
	}
	for _, r := range slices.Sorted(maps.Keys(b.hosts)) {
		h := b.hosts[r]
		h.Slow = slowRates(h.Link, map[string][]Rate{"loads": h.Load, "stores": h.Store})
		rep.HostLinks = append(rep.HostLinks, *h)
	}
	if len(b.o.GPUs) == 1 {
		rep.Unmeasured = append(rep.Unmeasured, fmt.Sprintf("one GPU (%s) has no peer: P2P read and write bandwidth, flag round trips and dependent loads between GPUs, and the all-to-all patterns cannot be measured here; what is measured is the GPU's link to pinned host memory (its loads and stores, one stream)", b.gpuName(0)))
	}
	for _, c := range rep.Corrupt {
		b.find("p2p.corrupt", Error, "%s", corruptText(b, c))
	}
	for _, p := range rep.Pairs {
		for _, s := range p.Slow {
			b.find("p2p.slow", Warn, "GPU%d %s GPU%d: %s", p.GPU, arrow(s), p.Peer, s)
		}
	}
	for _, h := range rep.HostLinks {
		for _, s := range h.Slow {
			b.find("p2p.slow", Warn, "GPU%d and pinned host memory: %s", h.GPU, s)
		}
	}
	switch {
	case run.Stopped != nil:
		b.find("p2p.interrupted", Info, "INTERRUPTED during %s: the ranks were stopped; the cases after it were not run (no verdict on them)", b.caseName(*run.Stopped))
	case run.Exit == torchrun.ExitInterrupted:
		b.find("p2p.interrupted", Info, "INTERRUPTED: the ranks were stopped before the probe began a case")
	case run.Hang != nil:
		// Its result, marked, is among Results: its finding is above.
	case run.Exit != torchrun.ExitOK:
		b.find("p2p.error", Error, "the probe ended with %s before its first case", run.Exit)
	case run.Error != "":
		b.find("p2p.error", Error, "%s", run.Error)
	case !run.Done:
		b.find("p2p.error", Error, "the probe exited without its last record: a rank ended early")
	}
	if run.BadLines > 0 {
		b.find("p2p.error", Error, "%d of the probe's records could not be read", run.BadLines)
	}
	for _, u := range rep.Unmeasured {
		b.find("p2p.unmeasured", Info, "%s", u)
	}
	sort.SliceStable(rep.Findings, func(i, j int) bool { return rank(rep.Findings[i].Severity) > rank(rep.Findings[j].Severity) })
	rep.Verdict = b.verdict()
}

func rank(s Severity) int {
	switch s {
	case Error:
		return 2
	case Warn:
		return 1
	}
	return 0
}

func (b *builder) gpuName(r int) string {
	if r < len(b.o.GPUs) && b.o.GPUs[r].Name != "" {
		return b.name(r) + ", " + b.o.GPUs[r].Name
	}
	return b.name(r)
}

func arrow(slow string) string {
	if strings.HasPrefix(slow, "read") {
		return "<-"
	}
	return "->"
}

// corruptText is a corruption's finding: CorruptText first, where a peer
// was involved.
func corruptText(b *builder, c Corruption) string {
	where := fmt.Sprintf("GPU%d's %ss", c.GPU, verb(c.Op))
	if c.Peer == HostPeer {
		where += " and pinned host memory"
	} else {
		where += fmt.Sprintf(" %s GPU%d", map[bool]string{true: "from", false: "to"}[c.Op == OpRead], c.Peer)
	}
	what := ""
	switch {
	case c.CPU != "":
		what = c.CPU
	case c.FirstBad != nil && c.FirstBad.Index < 0:
		what = c.FirstBad.Got
	default:
		what = fmt.Sprintf("%d of %d words wrong", c.BadWords, c.CheckedBytes/4)
		if c.FirstBad != nil {
			what += fmt.Sprintf(" (the first at word %d: %s)", c.FirstBad.Index, c.FirstBad.Got)
		}
	}
	test := c.Test
	switch {
	case c.Pattern != "":
		test = fmt.Sprintf("all-to-all %s, %s per peer", c.Pattern, allreduce.FormatBytes(c.Bytes))
	case c.Bytes > 0:
		test += " at " + allreduce.FormatBytes(c.Bytes)
	}
	if c.Peer == HostPeer {
		return fmt.Sprintf("the link to pinned host memory corrupts data: %s (%s, %s): %s; no GPU transfer through it can be trusted", where, c.Link, test, what)
	}
	return fmt.Sprintf("%s: %s (%s, %s): %s; custom allreduce must not run there (serve with --disable-custom-all-reduce)", CorruptText, where, c.Link, test, what)
}

func verb(op string) string {
	switch op {
	case OpRead, OpLoad, OpHostRead:
		return "load"
	case OpFlagRTT:
		return "flag"
	}
	return "store"
}

// slowRates names each rate (the largest size of each op) below
// SlowFraction of the link's nominal rate.
func slowRates(l Link, ops map[string][]Rate) []string {
	if l.NominalGBps <= 0 {
		return nil
	}
	var out []string
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		rs := ops[op]
		if len(rs) == 0 {
			continue
		}
		r := slices.MaxFunc(rs, func(a, b Rate) int { return a.Bytes - b.Bytes })
		if r.GBps.Median < SlowFraction*l.NominalGBps {
			out = append(out, fmt.Sprintf("%s at %s: %.1f GB/s, %.0f%% of its link, %s (%s)", op, allreduce.FormatBytes(r.Bytes), r.GBps.Median,
				100*r.GBps.Median/l.NominalGBps, l.Label, l.Basis))
		}
	}
	return out
}

// Asymmetry is a group's all-to-all read against its all-to-all write:
// what decides between pull (custom 1-stage and 2-stage read their
// peers) and push algorithms there.
type Asymmetry struct {
	Pattern   string  `json:"pattern"`
	Kind      string  `json:"kind"`
	ReadGBps  float64 `json:"read_gbps"` // per GPU, median
	WriteGBps float64 `json:"write_gbps"`
}

// Asymmetries pairs each group's read and write patterns, in report
// order.
func (rep *Report) Asymmetries() []Asymmetry {
	return asymmetries(rep.Patterns)
}

func asymmetries(ps []PatternReport) []Asymmetry {
	var out []Asymmetry
	for _, r := range ps {
		if r.Op != OpRead || r.PerGPUGBps == nil {
			continue
		}
		for _, w := range ps {
			if w.Op == OpWrite && w.Name == r.Name && w.PerGPUGBps != nil {
				out = append(out, Asymmetry{Pattern: r.Name, Kind: r.Kind, ReadGBps: r.PerGPUGBps.Median, WriteGBps: w.PerGPUGBps.Median})
			}
		}
	}
	return out
}

// Failed reports whether the run found corrupt data or an error.
func (rep *Report) Failed() bool {
	for _, f := range rep.Findings {
		if f.Severity == Error {
			return true
		}
	}
	return false
}

// Interrupted reports whether a signal stopped the run.
func (rep *Report) Interrupted() bool {
	return rep.Run.Exit == torchrun.ExitInterrupted
}
