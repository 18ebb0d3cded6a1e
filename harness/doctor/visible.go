package doctor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/shell"

	"github.com/arpatch/arpatch/harness/nvsmi"
)

// Visibility is which of the GPUs nvidia-smi lists a CUDA process sees.
// nvidia-smi ignores CUDA_VISIBLE_DEVICES and lists every GPU; the job
// sees only those the variable names, renumbered 0.. in its order.
type Visibility struct {
	// Spec is CUDA_VISIBLE_DEVICES as the job gets it; Set is false when
	// it is unset (every GPU visible, in nvidia-smi's order).
	Spec string `json:"cuda_visible_devices"`
	Set  bool   `json:"set"`
	// Indexes are the nvidia-smi indexes of the visible GPUs, in CUDA's
	// order (CUDA device 0 first). Nil when Unknown.
	Indexes []int `json:"indexes"`
	// Unknown says why the visible set could not be worked out (MIG
	// instances, UUIDs without nvidia-smi's uuid column); GPU findings
	// are then not drawn.
	Unknown string `json:"unknown,omitempty"`
	// Note says where the list stopped or why it is empty, as torch reads
	// it: an entry that names no GPU ends the list, a repeated one empties it.
	Note string `json:"note,omitempty"`
}

// ResolveVisible applies CUDA_VISIBLE_DEVICES (spec; set false when the
// variable is unset) to the GPUs nvidia-smi listed, with torch's rules:
// comma-separated integer indexes read like strtoul ("1gpu" is 1), or
// "GPU-" UUIDs and unique UUID prefixes; the first entry that is negative,
// out of range, ambiguous or unknown ends the list; a repeated entry makes
// it empty; "MIG-" instances cannot be mapped to nvidia-smi's GPU rows and
// leave the set Unknown.
//
// Upstream: pytorch torch/cuda/__init__.py (_parse_visible_devices, _transform_uuid_to_ordinals, _device_count_nvml).
func ResolveVisible(spec string, set bool, gpus []nvsmi.GPU) Visibility {
	v := Visibility{Spec: spec, Set: set}
	if !set {
		for _, g := range gpus {
			v.Indexes = append(v.Indexes, g.Index)
		}
		return v
	}
	v.Indexes = []int{}
	stop := func(entry, why string) {
		v.Note = fmt.Sprintf("entry %q %s: CUDA sees only the entries before it", entry, why)
	}
	switch {
	case strings.HasPrefix(spec, "MIG-"):
		v.Indexes, v.Unknown = nil, "CUDA_VISIBLE_DEVICES names MIG instances, which nvidia-smi --query-gpu does not list; custom allreduce needs whole GPUs with P2P"
		return v
	case strings.HasPrefix(spec, "GPU-"):
		for _, g := range gpus {
			if g.UUID == "" {
				v.Indexes, v.Unknown = nil, "CUDA_VISIBLE_DEVICES names GPU UUIDs and nvidia-smi printed none to match them with"
				return v
			}
		}
		for _, e := range strings.Split(spec, ",") {
			if !strings.HasPrefix(e, "GPU-") {
				stop(e, "is not a GPU UUID")
				break
			}
			var match []int
			for _, g := range gpus {
				if strings.HasPrefix(g.UUID, e) {
					match = append(match, g.Index)
				}
			}
			if len(match) != 1 {
				stop(e, fmt.Sprintf("matches %d GPUs", len(match)))
				break
			}
			if slices.Contains(v.Indexes, match[0]) {
				v.Indexes, v.Note = []int{}, fmt.Sprintf("entry %q repeats a GPU: CUDA then sees no GPU", e)
				return v
			}
			v.Indexes = append(v.Indexes, match[0])
		}
		return v
	}
	for _, e := range strings.Split(spec, ",") {
		e = strings.TrimSpace(e)
		digits := e[:len(e)-len(strings.TrimLeft(e, "0123456789"))]
		n, err := strconv.Atoi(digits)
		if err != nil {
			stop(e, "is not an index")
			break
		}
		if slices.Contains(v.Indexes, n) {
			v.Indexes, v.Note = []int{}, fmt.Sprintf("entry %q repeats a GPU: CUDA then sees no GPU", e)
			return v
		}
		if !slices.ContainsFunc(gpus, func(g nvsmi.GPU) bool { return g.Index == n }) {
			stop(e, fmt.Sprintf("is not one of the %d GPUs", len(gpus)))
			break
		}
		v.Indexes = append(v.Indexes, n)
	}
	return v
}

// ServerCommand is a --server-cmd line split as a shell splits it.
type ServerCommand struct {
	// Env holds the assignments before the program (VAR=value, also after
	// `env`): the server gets them on top of the caller's environment.
	Env []string `json:"env,omitempty"`
	// Program is the launcher, e.g. python -m sglang.launch_server.
	Program []string `json:"program"`
	// Args are the launcher's own arguments, read with the option table.
	Args []string `json:"args"`
}

// SplitServerCmd splits line with POSIX shell quoting and expansion
// ($VAR from env; command substitution is refused), then takes leading
// VAR=value words (and `env`) as the server's environment and the
// launcher as Program: `python [options] -m MODULE`, `python SCRIPT`,
// `sglang serve`, or the first word. The error names what did not parse.
func SplitServerCmd(line string, env func(string) string) (*ServerCommand, error) {
	words, err := shell.Fields(line, env)
	if err != nil {
		return nil, fmt.Errorf("--server-cmd: %w", err)
	}
	c := &ServerCommand{}
	i := 0
	for ; i < len(words); i++ {
		w := words[i]
		if w == "env" && len(c.Program) == 0 {
			continue
		}
		if k, _, ok := strings.Cut(w, "="); ok && identRe().MatchString(k) {
			c.Env = append(c.Env, w)
			continue
		}
		break
	}
	if i == len(words) {
		return nil, fmt.Errorf("--server-cmd %q names no program", line)
	}
	c.Program = []string{words[i]}
	i++
	base := words[i-1][strings.LastIndex(words[i-1], "/")+1:]
	switch {
	case strings.HasPrefix(base, "python"):
		for ; i < len(words); i++ {
			c.Program = append(c.Program, words[i])
			if words[i] == "-m" && i+1 < len(words) {
				i++
				c.Program = append(c.Program, words[i])
				i++
				break
			}
			if !strings.HasPrefix(words[i], "-") { // a script
				i++
				break
			}
		}
	case base == "sglang" && i < len(words) && words[i] == "serve":
		c.Program = append(c.Program, words[i])
		i++
	}
	c.Args = words[i:]
	return c, nil
}
