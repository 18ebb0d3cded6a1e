package stats

import (
	"sort"

	"github.com/arpatch/arpatch/harness/sglang"
)

// Divergence is where an arm's output first differs from the baseline's
// for one prompt.
type Divergence struct {
	Prompt int    `json:"prompt"`
	Offset int    `json:"offset"` // byte offset of the first difference
	Base   string `json:"base"`   // baseline text around it
	Arm    string `json:"arm"`    // arm text around it
}

// Agreement is an arm's greedy output compared with the baseline's, prompt
// by prompt. At temperature 0 a correct allreduce gives the same text; a
// broken one can be fast and wrong.
type Agreement struct {
	Prompts     int          `json:"prompts"`      // prompts both arms answered
	Identical   int          `json:"identical"`    // whole output identical
	IdenticalN  int          `json:"identical_at"` // identical over the first AgreeTokens tokens
	Share       float64      `json:"share"`        // IdenticalN / Prompts
	Threshold   float64      `json:"threshold"`
	Invalid     bool         `json:"invalid"`
	Divergences []Divergence `json:"divergences,omitempty"`
}

// Agree compares the first successful output per prompt of arm with
// base's. Over the first sglang.AgreeTokens tokens it uses the baseline's
// text at that point as the length to compare. The arm is invalid when the
// share identical there is below threshold (e.g. 0.9).
func Agree(base, arm []Trial, threshold float64) Agreement {
	b, a := firstOutputs(base), firstOutputs(arm)
	ag := Agreement{Threshold: threshold}
	var prompts []int
	for p := range b {
		if _, ok := a[p]; ok {
			prompts = append(prompts, p)
		}
	}
	sort.Ints(prompts)
	for _, p := range prompts {
		bs, as := b[p], a[p]
		ag.Prompts++
		if bs.Text == as.Text {
			ag.Identical++
			ag.IdenticalN++
			continue
		}
		n := len(bs.Text32)
		if len(as.Text) >= n && as.Text[:n] == bs.Text32 {
			ag.IdenticalN++
		}
		off := firstDiff(bs.Text, as.Text)
		ag.Divergences = append(ag.Divergences, Divergence{Prompt: p, Offset: off, Base: around(bs.Text, off), Arm: around(as.Text, off)})
	}
	if ag.Prompts > 0 {
		ag.Share = float64(ag.IdenticalN) / float64(ag.Prompts)
	}
	ag.Invalid = ag.Prompts == 0 || ag.Share < threshold
	return ag
}

func firstOutputs(ts []Trial) map[int]sglang.Sample {
	m := map[int]sglang.Sample{}
	for _, t := range ts {
		for _, s := range t.Samples {
			if _, ok := m[s.Prompt]; !ok && s.Err == "" {
				m[s.Prompt] = s
			}
		}
	}
	return m
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// around returns up to 40 bytes of s from 10 before off.
func around(s string, off int) string {
	lo := max(off-10, 0)
	hi := min(off+30, len(s))
	if lo > len(s) {
		return ""
	}
	return s[lo:hi]
}
