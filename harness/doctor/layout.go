package doctor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/internal/textfmt"
)

// layout is how SGLang places a server's ranks on the CUDA devices of one
// node, from its flags as argparse read them.
type layout struct {
	tp, pp, dp, base, step, nnodes int
	dpAttention                    bool
}

// layoutOf reads the layout flags; ok is false without a valid --tp-size
// or with a value SGLang refuses (serverFindings reports those).
func layoutOf(a *ServerArgs) (layout, bool) {
	if a == nil {
		return layout{}, false
	}
	ok := true
	num := func(name string, def int) int {
		s, given := a.Values[name]
		if !given {
			return def
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			ok = false
		}
		return n
	}
	_, dpa := a.Values["--enable-dp-attention"]
	l := layout{tp: num("--tp-size", 0), pp: num("--pp-size", 1), dp: num("--dp-size", 1), base: num("--base-gpu-id", 0),
		step: num("--gpu-id-step", 1), nnodes: num("--nnodes", 1), dpAttention: dpa}
	if !ok || l.tp < 1 || l.pp < 1 || l.dp < 1 || l.base < 0 || l.step < 1 || l.nnodes < 1 {
		return l, false
	}
	return l, true
}

// tpGroups returns the CUDA devices of each TP group on one node, in rank
// order: for DP rank d (one group for all of them with DP attention, which
// splits the TP group instead), PP stage p and TP rank t, SGLang uses
// base_gpu_id + d*tp*pp*gpu_id_step + p*tp + t*gpu_id_step.
//
// Upstream: python/sglang/srt/managers/data_parallel_controller.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (launch_dp_schedulers: base_gpu_id += tp_size * pp_size * gpu_id_step;
// launch_dp_attention_schedulers: one TP group; launch_tensor_parallel_group:
// gpu_id = base_gpu_id + pp_rank * tp_size_per_node + tp_rank * gpu_id_step);
// Upstream: python/sglang/srt/entrypoints/engine.py@84118acf50b3a4c74e85e9ff9033792552de1a76
// (Engine._launch_scheduler_processes, dp_size 1), also at 0bda0b168ad5.
func (l layout) tpGroups() [][]int {
	dp := l.dp
	if l.dpAttention {
		dp = 1
	}
	var out [][]int
	for d := range dp {
		for p := range l.pp {
			var g []int
			for t := range l.tp {
				g = append(g, l.base+d*l.tp*l.pp*l.step+p*l.tp+t*l.step)
			}
			out = append(out, g)
		}
	}
	return out
}

// last is the highest CUDA device the layout uses.
func (l layout) last() int {
	m := 0
	for _, g := range l.tpGroups() {
		m = max(m, slices.Max(g))
	}
	return m
}

// name names the layout: "TP 2 x DP 2".
func (l layout) name() string {
	s := fmt.Sprintf("TP %d", l.tp)
	if l.pp > 1 {
		s += fmt.Sprintf(" x PP %d", l.pp)
	}
	if l.dp > 1 && !l.dpAttention {
		s += fmt.Sprintf(" x DP %d", l.dp)
	}
	if l.dp > 1 && l.dpAttention {
		s += fmt.Sprintf(" (DP attention %d within it)", l.dp)
	}
	return s
}

// devices lists the CUDA devices of each TP group: "0,1 | 2,3".
func (l layout) devices() string {
	var gs []string
	for _, g := range l.tpGroups() {
		gs = append(gs, textfmt.Ints(g, ","))
	}
	return strings.Join(gs, " | ")
}

// describe names the layout and the CUDA devices of each TP group.
func (l layout) describe() string {
	s := l.name() + " uses CUDA devices " + l.devices()
	if len(l.tpGroups()) > 1 {
		s += " (one TP group each)"
	}
	return s
}
