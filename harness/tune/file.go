package tune

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arpatch/arpatch/internal/bounds"
	"github.com/arpatch/arpatch/internal/envfile"
	"github.com/arpatch/arpatch/internal/safefs"
	"github.com/arpatch/arpatch/internal/shellq"

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
// measured. It is an env file (package envfile): KEY=VALUE lines that
// `set -a; . ./FILE; set +a`, systemd's EnvironmentFile and docker
// --env-file read alike, with the record in "# arpatch-tune key: value"
// comments.
type File struct {
	Host       Host       `json:"host"`
	WorldSize  int        `json:"world_size"`
	Date       time.Time  `json:"date"`
	Mode       string     `json:"mode"`    // the mode the choice was made in: allreduce.ModeGraph or ModeEager
	Verdict    string     `json:"verdict"` // one line, e.g. "custom allreduce never beat NCCL: NCCL at every size"
	Thresholds Thresholds `json:"thresholds"`
	// Command is the tune's command line, run again to re-tune.
	Command string   `json:"command,omitempty"`
	Choices []Choice `json:"choices,omitempty"` // written as a table in comments; not read back
}

// fileVariables are the variables a tune file may set: the pcie series'
// and the NCCL knobs.
var fileVariables = append(slices.Clone(Variables), allreduce.NCCLKnobs...)

// Format renders the file. A record value that would break its comment
// line (a newline, another control character) is written quoted
// (envfile.Comment), so the file stays one that Parse reads.
func (f *File) Format() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# arpatch tune allreduce: the pcie series' PCIe-only allreduce dispatch, and the NCCL it leaves the largest sizes to.\n")
	fmt.Fprintf(&b, "# Use it with `arpatch bench --tune FILE`, `arpatch apply --tune FILE`, nightly's [bench] tune = \"FILE\", or `set -a; . ./FILE; set +a` (FILE with a slash: `.` looks a bare name up in PATH) before starting SGLang.\n")
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
		fmt.Fprintf(&b, "# arpatch-tune %s: %s\n", kv[0], envfile.CommentText(kv[1]))
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

// WriteChoices prints one line per size: the median in µs of NCCL as the
// environment leaves it, of the fastest correct NCCL variant (named), of
// each forced custom algorithm measured, the fastest of all, the one the
// tune chose, and the chosen custom algorithm's speed-up against the
// fastest NCCL.
func WriteChoices(w io.Writer, cs []Choice) {
	var algos []string
	for _, impl := range choiceImpls {
		if slices.ContainsFunc(cs, func(c Choice) bool { _, ok := c.US[impl]; return ok }) {
			algos = append(algos, impl)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"size", "nccl us", "fastest NCCL us"}
	for _, a := range algos {
		head = append(head, cmp.Or(allreduce.Algo(a), a)+" us")
	}
	fmt.Fprintln(tw, strings.Join(append(head, "fastest", "chosen", "vs fastest NCCL"), "\t"))
	us := func(v float64, ok bool) string {
		if !ok {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	for _, c := range cs {
		nccl, ok := c.US[allreduce.NCCL]
		row := []string{allreduce.FormatBytes(c.Bytes), us(nccl, ok)}
		if b, ok := c.US[c.BestNCCL]; ok {
			row = append(row, us(b, true)+" ("+c.BestNCCL+")")
		} else {
			row = append(row, "-")
		}
		for _, a := range algos {
			v, ok := c.US[a]
			row = append(row, us(v, ok))
		}
		sp := "-"
		if c.Speedup > 0 {
			sp = strconv.FormatFloat(c.Speedup, 'f', 2, 64) + "x"
		}
		fmt.Fprintln(tw, strings.Join(append(row, cmp.Or(c.Fastest, "-"), c.Chosen, sp), "\t"))
	}
	tw.Flush()
}

// choiceImpls are the custom implementations a tune chooses among, in the
// order of its table.
var choiceImpls = []string{allreduce.Custom1Stage, allreduce.Custom2Stage, allreduce.CustomPush1, allreduce.CustomPush2, allreduce.CustomIsland}

// Parse reads a tune file. name is used in errors. It returns an error
// naming the file and line for a line that envfile.Parse refuses (a line
// a shell would read otherwise than arpatch: neither a blank, a comment
// nor KEY=VALUE with a literal value; a line ending in CRLF, whose \r a
// shell would pass into the value, which the patched Python side
// refuses), a variable other than the pcie series', a variable or record
// line given twice (a shell takes the last; a reader would not see which),
// a bad threshold, a world size custom allreduce cannot run (not 2, 4, 6 or
// 8), a schedule the pcie series refuses at init at the file's world size
// (Thresholds.SeriesError), and a file without the schema line or without
// a variable it needs.
func Parse(name string, data []byte) (*File, error) {
	f := &File{}
	env := map[string]string{}
	meta := map[string]string{}
	lineOf := map[string]int{} // variable or "# arpatch-tune KEY" -> line
	retune := retuneText(name)
	lines, err := envfile.Parse(data)
	var le *envfile.LineError
	switch {
	case errors.As(err, &le) && le.CRLF:
		return nil, fmt.Errorf("%s:%d: the line ends in CRLF (\\r\\n): `%s` would pass the \\r into the value, which SGLang refuses; %s, or strip the \\r (`sed -i 's/\\r$//' %s`)", name, le.Line, envfile.Source(name), retune, shellq.Quote(name))
	case errors.As(err, &le):
		return nil, fmt.Errorf("%s:%d: %s: a shell, systemd and docker would not all read the line as arpatch does; %s", name, le.Line, le.Reason, retune)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for _, l := range lines {
		n := l.N
		if rest, ok := strings.CutPrefix(l.Comment, " arpatch-tune "); ok && l.IsComment {
			k, v, ok := strings.Cut(rest, ":")
			if ok {
				if prev, dup := lineOf["# "+k]; dup {
					return nil, fmt.Errorf("%s:%d: the %s record is given twice (lines %d and %d); %s", name, n, k, prev, n, retune)
				}
				lineOf["# "+k] = n
				meta[k] = envfile.UnquoteText(strings.TrimSpace(v))
			}
			continue
		}
		if l.Key == "" {
			continue
		}
		k, v := l.Key, l.Value
		if !slices.Contains(fileVariables, k) {
			return nil, fmt.Errorf("%s:%d: %s is not a variable a tune file sets (%s)", name, n, k, strings.Join(fileVariables, ", "))
		}
		if prev, dup := lineOf[k]; dup {
			return nil, fmt.Errorf("%s:%d: %s is set twice (lines %d and %d; a shell would take the last, %q, silently); keep one, or %s", name, n, k, prev, n, v, retune)
		}
		lineOf[k] = n
		env[k] = v
	}
	if meta["schema"] != Schema {
		return nil, fmt.Errorf("%s: not an arpatch tune file (no \"# arpatch-tune schema: %s\" line); %s", name, Schema, retune)
	}
	if _, ok := env[EnvForce]; !ok {
		return nil, fmt.Errorf("%s: no %s line (want %s=1: the thresholds apply only with the PCIe gate open); %s", name, EnvForce, EnvForce, retune)
	}
	if env[EnvForce] != "1" {
		return nil, fmt.Errorf("%s:%d: %s=%q, want 1: the thresholds apply only with the PCIe gate open", name, lineOf[EnvForce], EnvForce, env[EnvForce])
	}
	if _, ok := env[EnvMaxBytes]; !ok {
		return nil, fmt.Errorf("%s: no %s line; %s", name, EnvMaxBytes, retune)
	}
	t, err := FromEnv(env)
	if err != nil {
		line := 0
		for k, l := range lineOf {
			if !strings.HasPrefix(k, "#") && strings.Contains(err.Error(), k+"=") && (line == 0 || l < line) {
				line = l
			}
		}
		if line > 0 {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
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
		return nil, fmt.Errorf("%s: the host, gpus, world_size or date record is missing or unreadable; %s", name, retune)
	}
	if err := bounds.WorldSizeError(f.WorldSize); err != nil {
		return nil, fmt.Errorf("%s:%d: world_size %v, so no tune measured it; %s", name, lineOf["# world_size"], err, retune)
	}
	if t.Islands != "" {
		if _, err := allreduce.ParseIslands(t.Islands, f.WorldSize); err != nil {
			return nil, fmt.Errorf("%s:%d: %s=%w, but the tune was made at world size %d; %s", name, lineOf[EnvIslands], EnvIslands, err, f.WorldSize, retune)
		}
	}
	if err := t.SeriesError(f.WorldSize); err != nil {
		return nil, fmt.Errorf("%s:%d: %w; %s", name, lineOf[EnvSchedule], err, retune)
	}
	return f, nil
}

// Load reads and parses a tune file. A file that cannot be read is the
// *os.PathError, naming the file and no flag: the caller names the flag
// (--tune) or key (bench.tune) that gave path.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// HostError refuses a tune file made on another machine.
type HostError struct {
	Path       string
	Made, Here Host
	Differs    []string // "hostname", "GPUs"
	// Command is the remedy: the command that tunes on this host into
	// RetunePath(Path) (RetuneCommand), never the other host's recorded
	// command, whose inputs (--ext, --python, --out) are that host's.
	Command string
}

func (e *HostError) Error() string {
	cmd := e.Command
	if cmd == "" {
		cmd = RetuneCommand(e.Path, 0)
	}
	here := e.Here.Name
	if e.Here.GPUCount > 0 {
		here += " (" + e.Here.GPUs() + ")"
	}
	return fmt.Sprintf("tune file %s was made on %s (%s), this is %s: not the same %s, and thresholds measured there say nothing about this host's PCIe topology; tune here with `%s` and use %s, or pass --force-tune to use %s anyway",
		e.Path, e.Made.Name, e.Made.GPUs(), here, strings.Join(e.Differs, " or "), cmd, shellq.Quote(RetunePath(e.Path)), e.Path)
}

// RetuneCommand is the command that tunes on this host at world size ws
// (0: the recipe's bench.tp), with this host's inputs (e.g. "--src",
// "sglang" or "--ext", "x.so"; none: tune's default --src sglang), quoted
// as a shell reads it back, and writes RetunePath(path): never the tune
// file path the refused command read.
func RetuneCommand(path string, ws int, inputs ...string) string {
	args := []string{"arpatch", "tune", "allreduce"}
	if ws != 0 {
		args = append(args, "--world-size", strconv.Itoa(ws))
	}
	args = append(append(args, inputs...), "--out", RetunePath(path))
	return shellq.Join(args)
}

// RetunePath is the file a remedy's tune writes in place of the tune file
// path it refused: beside it, "tune.env" gives "tune-new.env".
func RetunePath(path string) string { return safefs.Beside(path, "new") }

// retuneText is a refusal's remedy for the tune file name: tune again,
// into RetunePath(name), and use that file.
func retuneText(name string) string {
	return fmt.Sprintf("tune again with `%s` and use %s", RetuneCommand(name, 0), shellq.Quote(RetunePath(name)))
}

// Check compares the file's host with here. It returns a *HostError when
// the hostname, GPU model or GPU count differ (unless force, which turns it
// into a warning), an *IslandsError when its islands or its schedule do
// not fit world size ws (force or not: the pcie series would refuse them
// at init), and warnings for a changed driver or NCCL, or a world
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
		tws := ws
		if tws == 0 {
			tws = f.WorldSize
		}
		he := &HostError{Path: path, Made: f.Host, Here: here, Differs: differs, Command: RetuneCommand(path, tws)}
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
		if _, err := allreduce.ParseIslands(f.Thresholds.Islands, ws); f.Thresholds.Islands != "" && err != nil {
			return nil, &IslandsError{Path: path, Islands: f.Thresholds.Islands, Made: f.WorldSize, WorldSize: ws, Command: RetuneCommand(path, ws)}
		}
		if err := f.Thresholds.SeriesError(ws); err != nil {
			return nil, &IslandsError{Path: path, Islands: f.Thresholds.Islands, Made: f.WorldSize, WorldSize: ws, Command: RetuneCommand(path, ws), Scratch: err}
		}
		warnings = append(warnings, fmt.Sprintf("tune file %s was measured at world size %d, this run uses %d: its thresholds may not fit", path, f.WorldSize, ws))
	}
	return warnings, nil
}

// IslandsError refuses a tune file whose islands are no partition of the
// ranks at the run's world size, or whose schedule does not fit the
// scratch there (Scratch): the pcie series would refuse
// SGLANG_PCIE_CUSTOM_AR_ISLANDS at init, and SGLang would serve on NCCL
// (Upstream: python/sglang/srt/distributed/parallel_state.py@84118acf50b3
// (GroupCoordinator.__init__) catches it). --force-tune does not help.
type IslandsError struct {
	Path, Islands   string
	Made, WorldSize int
	// Command is the remedy: the command that tunes at WorldSize here into
	// RetunePath(Path) (RetuneCommand, with the caller's inputs).
	Command string
	// Scratch, when set, is why the islands fit but the schedule does not
	// at WorldSize (Thresholds.SeriesError).
	Scratch error
}

func (e *IslandsError) Error() string {
	if e.Scratch != nil {
		return fmt.Sprintf("tune file %s was made at world size %d; at world size %d: %v: tune at this world size with `%s` and use %s", e.Path, e.Made, e.WorldSize, e.Scratch, e.Command, shellq.Quote(RetunePath(e.Path)))
	}
	return fmt.Sprintf("tune file %s sets %s=%s for world size %d; at world size %d the pcie series refuses it at init and SGLang would run on NCCL: tune at this world size with `%s` and use %s",
		e.Path, EnvIslands, e.Islands, e.Made, e.WorldSize, e.Command, shellq.Quote(RetunePath(e.Path)))
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
