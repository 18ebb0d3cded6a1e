package tune

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arpatch/arpatch/harness/allreduce"
)

// Schema names the tune file's layout.
const Schema = "arpatch.tune/v1"

// Host identifies the machine a tune was measured on. Name, GPUModel and
// GPUCount must match for a tune file to be used without --force; a
// different Driver or NCCL is reported, not refused.
type Host struct {
	Name     string `json:"name"` // hostname
	GPUModel string `json:"gpu_model"`
	GPUCount int    `json:"gpu_count"`
	Driver   string `json:"driver,omitempty"`
	NCCL     string `json:"nccl,omitempty"`
}

// GPUs is "8 x NVIDIA RTX PRO 6000 Blackwell Server Edition".
func (h Host) GPUs() string { return fmt.Sprintf("%d x %s", h.GPUCount, h.GPUModel) }

// File is a tune file: the thresholds and where, when and how they were
// measured. It is an env file: KEY=VALUE lines that `set -a; . FILE`,
// systemd's EnvironmentFile and docker --env-file read, with the record
// in "# arpatch-tune key: value" comments.
type File struct {
	Host       Host       `json:"host"`
	WorldSize  int        `json:"world_size"`
	Date       time.Time  `json:"date"`
	Mode       string     `json:"mode"`    // the mode the choice was made in: "graph" or "eager"
	Verdict    string     `json:"verdict"` // one line, e.g. "custom allreduce never beat NCCL: NCCL at every size"
	Thresholds Thresholds `json:"thresholds"`
	// Command is the tune's command line, run again to re-tune.
	Command string   `json:"command,omitempty"`
	Choices []Choice `json:"choices,omitempty"` // written as a table in comments; not read back
}

// Format renders the file.
func (f *File) Format() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# arpatch tune allreduce: thresholds for the pcie series' PCIe-only allreduce dispatch.\n")
	fmt.Fprintf(&b, "# Use it with `arpatch bench --tune FILE`, `arpatch apply --tune FILE`, nightly's [bench] tune = \"FILE\", or `set -a; . FILE; set +a` before starting SGLang.\n")
	for _, kv := range [][2]string{
		{"schema", Schema},
		{"host", f.Host.Name},
		{"gpus", f.Host.GPUs()},
		{"driver", f.Host.Driver},
		{"nccl", f.Host.NCCL},
		{"world_size", strconv.Itoa(f.WorldSize)},
		{"date", f.Date.UTC().Format(time.RFC3339)},
		{"mode", f.Mode},
		{"verdict", f.Verdict},
		{"command", f.Command},
	} {
		fmt.Fprintf(&b, "# arpatch-tune %s: %s\n", kv[0], kv[1])
	}
	if len(f.Choices) > 0 {
		b.WriteString("#\n")
		var t bytes.Buffer
		WriteChoices(&t, f.Choices)
		for _, l := range strings.Split(strings.TrimRight(t.String(), "\n"), "\n") {
			b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
		}
	}
	for _, kv := range f.Thresholds.Env() {
		b.WriteString(kv + "\n")
	}
	return b.Bytes()
}

// WriteChoices prints one line per size: each algorithm's median in µs,
// the fastest correct one and the one the thresholds choose.
func WriteChoices(w *bytes.Buffer, cs []Choice) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "size\tnccl us\t1-stage us\t2-stage us\tfastest\tchosen")
	for _, c := range cs {
		cell := func(alg string) string {
			if v, ok := c.US[alg]; ok {
				return strconv.FormatFloat(v, 'f', 1, 64)
			}
			return "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", allreduce.FormatBytes(c.Bytes), cell(allreduce.NCCL), cell(allreduce.Custom1Stage),
			cell(allreduce.Custom2Stage), orDash(c.Fastest), c.Chosen)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Parse reads a tune file. name is used in errors. It returns an error
// naming the file and line for a line that is neither a comment nor
// KEY=VALUE, a variable other than the pcie series', a bad threshold, or
// a file without the schema line.
func Parse(name string, data []byte) (*File, error) {
	f := &File{}
	env := map[string]string{}
	meta := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "# arpatch-tune "); ok {
			k, v, ok := strings.Cut(rest, ":")
			if ok {
				meta[k] = strings.TrimSpace(v)
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: %q is not KEY=VALUE", name, n, line)
		}
		switch k {
		case EnvForce, EnvMaxBytes, Env1StageMax:
		default:
			return nil, fmt.Errorf("%s:%d: %s is not a variable a tune file sets (%s, %s, %s)", name, n, k, EnvForce, EnvMaxBytes, Env1StageMax)
		}
		env[k] = v
	}
	if meta["schema"] != Schema {
		return nil, fmt.Errorf("%s: not an arpatch tune file (no \"# arpatch-tune schema: %s\" line); make one with `arpatch tune allreduce --out %s`", name, Schema, name)
	}
	if env[EnvForce] != "1" {
		return nil, fmt.Errorf("%s: %s=%q, want 1: the thresholds apply only with the PCIe gate open", name, EnvForce, env[EnvForce])
	}
	if _, ok := env[EnvMaxBytes]; !ok {
		return nil, fmt.Errorf("%s: no %s line", name, EnvMaxBytes)
	}
	t, err := FromEnv(env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f.Thresholds = t
	f.Host.Name, f.Host.Driver, f.Host.NCCL = meta["host"], meta["driver"], meta["nccl"]
	if n, model, ok := strings.Cut(meta["gpus"], " x "); ok {
		f.Host.GPUCount, _ = strconv.Atoi(n)
		f.Host.GPUModel = model
	}
	f.WorldSize, _ = strconv.Atoi(meta["world_size"])
	f.Date, _ = time.Parse(time.RFC3339, meta["date"])
	f.Mode, f.Verdict, f.Command = meta["mode"], meta["verdict"], meta["command"]
	if f.Host.Name == "" || f.Host.GPUCount == 0 || f.WorldSize == 0 || f.Date.IsZero() {
		return nil, fmt.Errorf("%s: the host, gpus, world_size or date record is missing or unreadable; re-run `arpatch tune allreduce --out %s`", name, name)
	}
	return f, nil
}

// Load reads and parses a tune file.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tune file: %w", err)
	}
	return Parse(path, b)
}

// HostError refuses a tune file made on another machine.
type HostError struct {
	Path       string
	Made, Here Host
	Differs    []string // "hostname", "GPUs"
	Command    string   // the recorded tune command, the remedy
}

func (e *HostError) Error() string {
	cmd := e.Command
	if cmd == "" {
		cmd = "arpatch tune allreduce --out " + e.Path
	}
	here := e.Here.Name
	if e.Here.GPUCount > 0 {
		here += " (" + e.Here.GPUs() + ")"
	}
	return fmt.Sprintf("tune file %s was made on %s (%s), this is %s: not the same %s, and thresholds measured there say nothing about this host's PCIe topology; tune here with `%s`, or pass --force-tune to use it anyway",
		e.Path, e.Made.Name, e.Made.GPUs(), here, strings.Join(e.Differs, " or "), cmd)
}

// Check compares the file's host with here. It returns a *HostError when
// the hostname, GPU model or GPU count differ (unless force, which turns it
// into a warning), and warnings for a changed driver or NCCL, or a world
// size other than ws (0: not checked).
func (f *File) Check(path string, here Host, ws int, force bool) (warnings []string, err error) {
	var differs []string
	if f.Host.Name != here.Name {
		differs = append(differs, "hostname")
	}
	if here.GPUCount == 0 {
		warnings = append(warnings, fmt.Sprintf("this host's GPUs could not be read (nvidia-smi): tune file %s's record of %s is not checked", path, f.Host.GPUs()))
	} else if f.Host.GPUModel != here.GPUModel || f.Host.GPUCount != here.GPUCount {
		differs = append(differs, "GPUs")
	}
	if len(differs) > 0 {
		he := &HostError{Path: path, Made: f.Host, Here: here, Differs: differs, Command: f.Command}
		if !force {
			return nil, he
		}
		warnings = append(warnings, "--force-tune: "+he.Error())
	}
	for _, c := range [][3]string{{"driver", f.Host.Driver, here.Driver}, {"NCCL", f.Host.NCCL, here.NCCL}} {
		if c[1] != "" && c[2] != "" && c[1] != c[2] {
			warnings = append(warnings, fmt.Sprintf("tune file %s was measured with %s %s, this host has %s: re-tune if the timings moved", path, c[0], c[1], c[2]))
		}
	}
	if ws != 0 && f.WorldSize != ws {
		warnings = append(warnings, fmt.Sprintf("tune file %s was measured at world size %d, this run uses %d: its thresholds may not fit", path, f.WorldSize, ws))
	}
	return warnings, nil
}

// Dispatch lists, per size, what the patched stack runs with t at world
// size ws, e.g. "40K custom-2stage". Sizes are sorted.
func Dispatch(t Thresholds, ws int, sizes []int) []string {
	s := append([]int(nil), sizes...)
	sort.Ints(s)
	out := make([]string, len(s))
	for i, n := range s {
		out[i] = allreduce.FormatBytes(n) + " " + t.Algorithm(ws, n)
	}
	return out
}
