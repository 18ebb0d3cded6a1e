// Package nvsmi reads nvidia-smi's documented text formats: the GPU rows
// of `nvidia-smi --query-gpu=... --format=csv` (ParseQueryGPU), the link
// matrix of `nvidia-smi topo -m` (ParseTopoMatrix) and the P2P status
// matrices of `nvidia-smi topo -p2p r|w` (ParseP2P). A value nvidia-smi
// cannot read is left unknown and named, never guessed. It runs
// nvidia-smi only for Drivers, the GPU names a bench report records, and
// judges nothing: harness/doctor runs nvidia-smi and draws findings,
// harness/traffic models a topology; nightly and tune record the GPUs.
// The parsers are tested on recorded outputs (harness/doctor/testdata)
// by harness/doctor's and harness/traffic's tests, and fuzzed here
// (testdata/fuzz holds the seeds): output that is not what nvidia-smi
// prints (a GPU index twice, a matrix that is not square, rows that do
// not match the header) is an error that names the line, never a value
// that a caller could index out of range with.
package nvsmi

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/procgroup"
)

// GPU is one row of `nvidia-smi --query-gpu=... --format=csv`. A field
// nvidia-smi could not read (printed as "[N/A]", "[Not Supported]",
// "[Unknown Error]", "[Insufficient Permissions]", ... or a number that is
// not one) is left at its zero value and named in Unreadable, so no
// finding is drawn from it.
type GPU struct {
	Index        int    `json:"index"`
	Name         string `json:"name"`
	UUID         string `json:"uuid,omitempty"` // "GPU-8932f937-...", what CUDA_VISIBLE_DEVICES may name
	BusID        string `json:"bus_id"`
	ComputeCap   string `json:"compute_cap"` // "12.0", "9.0"
	Driver       string `json:"driver"`
	PCIeGen      int    `json:"pcie_gen"`
	PCIeGenMax   int    `json:"pcie_gen_max"`
	PCIeWidth    int    `json:"pcie_width"`
	PCIeWidthMax int    `json:"pcie_width_max"`
	MemoryMiB    int    `json:"memory_mib"`
	// Unreadable lists "field: text as printed" for each field nvidia-smi
	// could not read, e.g. "compute_cap: [N/A]".
	Unreadable []string `json:"unreadable,omitempty"`
}

// QueryGPUFields is the --query-gpu list doctor, nightly and tune ask
// for. ParseQueryGPU maps columns by the CSV header, so recordings made
// with an older, shorter list (no uuid) still parse.
const QueryGPUFields = "index,name,pci.bus_id,compute_cap,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,memory.total,uuid"

// unreadableRe matches what nvidia-smi prints for a value it cannot read:
// a bracketed reason such as [N/A], [Not Supported], [Unknown Error],
// [Insufficient Permissions], [GPU is lost] or [Requires Pro].
var unreadableRe = lazyre.New(`^\[[^\]]*\]$`)

// ParseQueryGPU reads nvidia-smi --query-gpu=QueryGPUFields --format=csv
// output. With its header line, columns are found by name (units such as
// " [MiB]" stripped); without it (csv,noheader), they are taken in
// QueryGPUFields order. A line of one field that is not a number is
// skipped (a message nvidia-smi prints among the rows). Errors, naming
// the line: a CSV that does not parse, a row whose index is not a
// number, a negative index, an index given twice (each GPU has one row),
// a bus id given twice, indices that are not 0 to N-1 (nvidia-smi numbers
// every GPU of the host, whatever CUDA_VISIBLE_DEVICES says), or no GPU
// row.
func ParseQueryGPU(out string) ([]GPU, error) {
	r := csv.NewReader(strings.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	cols := strings.Split(QueryGPUFields, ",")
	var gpus []GPU
	lineOf := map[int]int{}     // GPU index -> its line
	busLine := map[string]int{} // bus id -> its line
	for {
		row, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-gpu: %w", err)
		}
		line, _ := r.FieldPos(0)
		if len(row) > 0 && strings.TrimSpace(row[0]) == "index" {
			cols = cols[:0:0]
			for _, h := range row {
				h, _, _ = strings.Cut(strings.TrimSpace(h), " [")
				cols = append(cols, h)
			}
			continue
		}
		var g GPU
		field := map[string]string{}
		for i, c := range cols {
			if i < len(row) {
				field[c] = strings.TrimSpace(row[i])
			}
		}
		idx, ok := field["index"]
		if !ok {
			continue
		}
		if g.Index, err = strconv.Atoi(idx); err != nil {
			if len(row) == 1 {
				continue // a message among the rows
			}
			return nil, fmt.Errorf("nvidia-smi --query-gpu line %d: GPU index %q is not a number", line, idx)
		}
		if g.Index < 0 {
			return nil, fmt.Errorf("nvidia-smi --query-gpu line %d: GPU index %d is negative", line, g.Index)
		}
		if first, dup := lineOf[g.Index]; dup {
			return nil, fmt.Errorf("nvidia-smi --query-gpu line %d: GPU index %d again (line %d has it): each GPU has one row", line, g.Index, first)
		}
		lineOf[g.Index] = line
		readFields(&g, field)
		if b := BusID(g.BusID); b != "" {
			if first, dup := busLine[b]; dup {
				return nil, fmt.Errorf("nvidia-smi --query-gpu line %d: bus id %s again (line %d has it): each GPU has one row", line, g.BusID, first)
			}
			busLine[b] = line
		}
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("nvidia-smi --query-gpu printed no GPU rows")
	}
	for _, g := range gpus {
		if g.Index >= len(gpus) {
			return nil, fmt.Errorf("nvidia-smi --query-gpu line %d: GPU index %d of %d GPUs: nvidia-smi numbers them 0 to %d", lineOf[g.Index], g.Index, len(gpus), len(gpus)-1)
		}
	}
	return gpus, nil
}

// readFields fills g's name, uuid, bus id, compute capability, driver,
// PCIe link and memory from field (a row's values by column name); a
// value nvidia-smi could not read, or a number or compute capability
// that does not parse, goes to g.Unreadable as "column: value" instead.
func readFields(g *GPU, field map[string]string) {
	unreadable := func(name string) { g.Unreadable = append(g.Unreadable, name+": "+field[name]) }
	text := func(name string, dst *string) {
		v, ok := field[name]
		switch {
		case !ok:
		case unreadableRe().MatchString(v) || v == "":
			unreadable(name)
		default:
			*dst = v
		}
	}
	// num reads a number that valid admits (any that is not negative
	// when valid is nil).
	num := func(name string, dst *int, valid func(int) bool) {
		v, ok := field[name]
		if !ok {
			return
		}
		n, err := strconv.Atoi(strings.TrimSuffix(v, " MiB"))
		if err != nil || n < 0 || valid != nil && !valid(n) {
			unreadable(name)
			return
		}
		*dst = n
	}
	// A PCIe link is x1, x2, x4, x8, x12, x16 or x32 lanes wide, of a
	// generation from 1, and runs at most at what it can: anything else
	// is no link nvidia-smi measured, listed as unreadable and left
	// unknown (the model then assumes gen 5 x16).
	gen := func(n int) bool { return n >= 1 }
	lanes := func(n int) bool { return slices.Contains([]int{1, 2, 4, 8, 12, 16, 32}, n) }
	text("name", &g.Name)
	text("uuid", &g.UUID)
	text("pci.bus_id", &g.BusID)
	text("compute_cap", &g.ComputeCap)
	text("driver_version", &g.Driver)
	num("pcie.link.gen.current", &g.PCIeGen, gen)
	num("pcie.link.gen.max", &g.PCIeGenMax, gen)
	num("pcie.link.width.current", &g.PCIeWidth, lanes)
	num("pcie.link.width.max", &g.PCIeWidthMax, lanes)
	num("memory.total", &g.MemoryMiB, nil)
	for _, l := range []struct {
		name string
		cur  *int
		max  int
	}{{"pcie.link.gen.current", &g.PCIeGen, g.PCIeGenMax}, {"pcie.link.width.current", &g.PCIeWidth, g.PCIeWidthMax}} {
		if l.max > 0 && *l.cur > l.max {
			unreadable(l.name)
			*l.cur = 0
		}
	}
	if g.ComputeCap != "" && !ccRe().MatchString(g.ComputeCap) {
		g.Unreadable = append(g.Unreadable, "compute_cap: "+g.ComputeCap)
		g.ComputeCap = ""
	}
}

var ccRe = lazyre.New(`^[0-9]+\.[0-9]+$`)

// Topology is `nvidia-smi topo -m`: the link between each pair of GPUs and
// each GPU's CPU and NUMA affinity.
type Topology struct {
	GPUs  []string            `json:"gpus"`  // "GPU0", ...
	Links map[string][]string `json:"links"` // GPU -> link to each GPU ("X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS")
	CPU   map[string]string   `json:"cpu_affinity"`
	NUMA  map[string]string   `json:"numa_affinity"`
}

var ansi = lazyre.New(`\x1b\[[0-9;]*m`)

// ParseTopoMatrix reads `nvidia-smi topo -m`. Columns other than GPUs (NICs)
// are ignored; ANSI underline codes that nvidia-smi prints on a terminal
// are stripped. Errors, naming the line: no GPU row, a GPU column or row
// twice, rows other than the header's GPUs or in another order, a row
// with fewer links than GPUs.
func ParseTopoMatrix(out string) (*Topology, error) {
	lines := strings.Split(ansi().ReplaceAllString(out, ""), "\n")
	var header, cols []string // cols: the header's GPU columns
	headerLine := 0
	t := &Topology{Links: map[string][]string{}, CPU: map[string]string{}, NUMA: map[string]string{}}
	for n, l := range lines {
		n++
		f := strings.Split(strings.TrimRight(l, " \t\r"), "\t")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if header == nil {
			if len(f) > 1 && f[0] == "" && strings.HasPrefix(f[1], "GPU") {
				header, headerLine = f[1:], n
				for _, h := range header {
					if isGPUColumn(h) {
						if slices.Contains(cols, h) {
							return nil, fmt.Errorf("nvidia-smi topo -m line %d: column %s twice", n, h)
						}
						cols = append(cols, h)
					}
				}
			}
			continue
		}
		if len(f) == 0 || !strings.HasPrefix(f[0], "GPU") {
			if strings.HasPrefix(strings.TrimSpace(l), "Legend") {
				break
			}
			continue
		}
		row := f[0]
		switch i := len(t.GPUs); {
		case slices.Contains(t.GPUs, row):
			return nil, fmt.Errorf("nvidia-smi topo -m line %d: row %s twice", n, row)
		case i >= len(cols) || cols[i] != row:
			return nil, fmt.Errorf("nvidia-smi topo -m line %d: row %s where the header (line %d) has %s", n, row, headerLine, cmp.Or(strings.Join(cols[min(i, len(cols)):], " or "), "no more GPUs"))
		}
		t.GPUs = append(t.GPUs, row)
		for i, h := range header {
			if i+1 >= len(f) {
				break
			}
			switch {
			case isGPUColumn(h):
				t.Links[row] = append(t.Links[row], f[i+1])
			case h == "CPU Affinity":
				t.CPU[row] = f[i+1]
			case h == "NUMA Affinity":
				t.NUMA[row] = f[i+1]
			}
		}
	}
	if len(t.GPUs) == 0 {
		return nil, fmt.Errorf("nvidia-smi topo -m: no GPU rows found")
	}
	if len(t.GPUs) != len(cols) {
		return nil, fmt.Errorf("nvidia-smi topo -m: %d GPU rows for the %d GPU columns of the header (line %d)", len(t.GPUs), len(cols), headerLine)
	}
	for _, g := range t.GPUs {
		if len(t.Links[g]) != len(t.GPUs) {
			return nil, fmt.Errorf("nvidia-smi topo -m: row %s has %d links for %d GPUs", g, len(t.Links[g]), len(t.GPUs))
		}
	}
	// A link is one link both ways: the matrix is symmetric.
	for i, a := range t.GPUs {
		for j, b := range t.GPUs[:i] {
			if x, y := t.Links[a][j], t.Links[b][i]; x != y {
				return nil, fmt.Errorf("nvidia-smi topo -m: %s to %s is %s, but %s to %s is %s: a link is the same both ways", a, b, x, b, a, y)
			}
		}
	}
	return t, nil
}

// isGPUColumn reports whether a topo -m header names a GPU ("GPU3"), not
// an affinity column ("GPU NUMA ID").
func isGPUColumn(h string) bool { return strings.HasPrefix(h, "GPU") && !strings.Contains(h, "NUMA") }

// FullNVLink reports whether every pair of GPUs is joined by NVLink (NV#),
// which is what SGLang's is_full_nvlink checks through NVML.
func (t *Topology) FullNVLink() bool {
	for i, g := range t.GPUs {
		for j, l := range t.Links[g] {
			if i != j && !strings.HasPrefix(l, "NV") {
				return false
			}
		}
	}
	return true
}

// PCIeOnly reports whether no pair is joined by NVLink.
func (t *Topology) PCIeOnly() bool {
	for i, g := range t.GPUs {
		for j, l := range t.Links[g] {
			if i != j && strings.HasPrefix(l, "NV") {
				return false
			}
		}
	}
	return true
}

// NUMANodes returns the distinct NUMA affinities of the GPUs.
func (t *Topology) NUMANodes() []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range t.GPUs {
		n := t.NUMA[g]
		if n != "" && n != "N/A" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// LinkCounts counts the GPU pairs (i < j) by link type.
func (t *Topology) LinkCounts() map[string]int {
	c := map[string]int{}
	for i, g := range t.GPUs {
		for j, l := range t.Links[g] {
			if j > i {
				if strings.HasPrefix(l, "NV") {
					l = "NVLink"
				}
				c[l]++
			}
		}
	}
	return c
}

// PairsByLink counts the GPU pairs by link, sorted by link name, e.g.
// "NODE 8, PIX 4, SYS 16" or "NVLink 28".
func (t *Topology) PairsByLink() string {
	counts := t.LinkCounts()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// Summary is the topology in one line, comparable across runs: the GPU
// count, the pairs by link and the NUMA split, e.g. "8 GPUs: NODE 8,
// PIX 4, SYS 16; 2 NUMA nodes".
func (t *Topology) Summary() string {
	s := fmt.Sprintf("%d GPUs: %s", len(t.GPUs), t.PairsByLink())
	if n := len(t.NUMANodes()); n > 1 {
		s += fmt.Sprintf("; %d NUMA nodes", n)
	}
	return s
}

// P2PMatrix is `nvidia-smi topo -p2p r` or `w`: per pair "OK", "NS" (not
// supported), "CNS" (chipset), "GNS" (GPU), "TNS" (topology), "U".
type P2PMatrix struct {
	GPUs   []string            `json:"gpus"`
	Status map[string][]string `json:"status"`
}

// ParseP2P reads `nvidia-smi topo -p2p r|w|n`: a header line of GPU
// names, then a row per GPU, in the header's order. Errors, naming the
// line: no GPU rows, a GPU in the header twice, a row whose GPU is not the
// header's next one (a row twice, or out of order), a row with another
// number of cells than GPUs, fewer rows than GPUs.
func ParseP2P(out string) (*P2PMatrix, error) {
	m := &P2PMatrix{Status: map[string][]string{}}
	var header []string
	headerLine := 0
	for n, l := range strings.Split(ansi().ReplaceAllString(out, ""), "\n") {
		n++
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if f[0] == "Legend:" {
			break
		}
		if header == nil && strings.HasPrefix(f[0], "GPU") && !strings.Contains(l, "X") {
			for _, g := range f {
				if slices.Contains(header, g) {
					return nil, fmt.Errorf("nvidia-smi topo -p2p line %d: GPU %s twice in the header", n, g)
				}
				header = append(header, g)
			}
			headerLine = n
			continue
		}
		if header == nil || !strings.HasPrefix(f[0], "GPU") {
			continue
		}
		i := len(m.GPUs)
		switch {
		case i >= len(header) || f[0] != header[i]:
			return nil, fmt.Errorf("nvidia-smi topo -p2p line %d: row %s where the header (line %d) has %s", n, f[0], headerLine, cmp.Or(strings.Join(header[min(i, len(header)):], " or "), "no more GPUs"))
		case len(f) != len(header)+1:
			return nil, fmt.Errorf("nvidia-smi topo -p2p line %d: row %s has %d cells for %d GPUs", n, f[0], len(f)-1, len(header))
		}
		m.GPUs = append(m.GPUs, f[0])
		m.Status[f[0]] = f[1:]
	}
	switch {
	case len(m.GPUs) == 0:
		return nil, fmt.Errorf("nvidia-smi topo -p2p: no GPU rows found")
	case len(m.GPUs) != len(header):
		return nil, fmt.Errorf("nvidia-smi topo -p2p: %d GPU rows for the %d GPUs of the header (line %d)", len(m.GPUs), len(header), headerLine)
	}
	return m, nil
}

// Blocked lists the pairs "GPU0->GPU1: NS" whose status says P2P is not
// supported (NS, CNS, GNS, TNS, or anything else but OK). "U" (unknown) is
// not a verdict and is listed by Unknown instead.
func (m *P2PMatrix) Blocked() []string {
	var out []string
	for i, g := range m.GPUs {
		for j, s := range m.Status[g][:min(len(m.Status[g]), len(m.GPUs))] {
			if i != j && s != "OK" && s != "X" && s != "U" {
				out = append(out, fmt.Sprintf("%s->%s: %s", g, m.GPUs[j], s))
			}
		}
	}
	return out
}

// Unknown lists the pairs "GPU0->GPU1" whose status nvidia-smi printed as
// U (unknown).
func (m *P2PMatrix) Unknown() []string {
	var out []string
	for i, g := range m.GPUs {
		for j, s := range m.Status[g][:min(len(m.Status[g]), len(m.GPUs))] {
			if i != j && s == "U" {
				out = append(out, fmt.Sprintf("%s->%s", g, m.GPUs[j]))
			}
		}
	}
	return out
}

// Sub returns the matrix restricted to the named GPUs, in that order; a
// name the matrix lacks, or one named again, is left out.
func (m *P2PMatrix) Sub(names []string) *P2PMatrix {
	pos := map[string]int{}
	for i, g := range m.GPUs {
		pos[g] = i
	}
	out := &P2PMatrix{Status: map[string][]string{}}
	for _, a := range names {
		if _, ok := pos[a]; ok && !slices.Contains(out.GPUs, a) {
			out.GPUs = append(out.GPUs, a)
		}
	}
	for _, a := range out.GPUs {
		for _, b := range out.GPUs {
			out.Status[a] = append(out.Status[a], cell(m.Status[a], pos[b]))
		}
	}
	return out
}

// cell is row[j], or "" past its end (a matrix not made by a parser).
func cell(row []string, j int) string {
	if j < len(row) {
		return row[j]
	}
	return ""
}

// Sub returns the topology restricted to the named GPUs, in that order; a
// name the matrix lacks, or one named again, is left out.
func (t *Topology) Sub(names []string) *Topology {
	pos := map[string]int{}
	for i, g := range t.GPUs {
		pos[g] = i
	}
	out := &Topology{Links: map[string][]string{}, CPU: map[string]string{}, NUMA: map[string]string{}}
	for _, a := range names {
		if _, ok := pos[a]; ok && !slices.Contains(out.GPUs, a) {
			out.GPUs = append(out.GPUs, a)
		}
	}
	for _, a := range out.GPUs {
		for _, b := range out.GPUs {
			out.Links[a] = append(out.Links[a], cell(t.Links[a], pos[b]))
		}
		out.CPU[a], out.NUMA[a] = t.CPU[a], t.NUMA[a]
	}
	return out
}

// BusID writes a PCI bus ID as the kernel and lspci -D do, lower case
// with a 4-digit domain: nvidia-smi's "00000000:1A:00.0" and the driver's
// "0000:1a:00.0" both give "0000:1a:00.0". An ID it cannot read comes
// back lower-cased and trimmed.
func BusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return s
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}

// Drivers lists "name, driver" per GPU from `nvidia-smi
// --query-gpu=name,driver_version --format=csv,noheader`, nothing when
// nvidia-smi is missing, fails or does not answer in 20 s (a driver that
// is stuck: a report does not wait for it).
func Drivers(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := procgroup.Command(ctx, 0, "nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader").Output()
	if err != nil {
		return nil
	}
	var g []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			g = append(g, l)
		}
	}
	return g
}
