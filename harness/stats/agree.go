package stats

import (
	"sort"
	"strings"

	"github.com/arpatch/arpatch/harness/sglang"
)

// Divergence is where one of an arm's outputs first differs from the
// baseline's for the same prompt.
type Divergence struct {
	Prompt int `json:"prompt"`
	Trial  int `json:"trial"` // the arm's trial (1-based) that diverged first for this prompt
	// Concurrency is the level of that trial.
	Concurrency int    `json:"concurrency,omitempty"`
	Offset      int    `json:"offset"` // byte offset of the first difference
	Base        string `json:"base"`   // baseline text around it
	Arm         string `json:"arm"`    // arm text around it
}

// Agreement is an arm's greedy output compared with the baseline's. At
// temperature 0 a correct allreduce gives the same text; a broken one can
// be fast and wrong, and can turn wrong in any trial (a race, a buffer
// that fills), so every output of every trial is compared, not one per
// prompt.
type Agreement struct {
	Prompts     int          `json:"prompts"`      // prompts the baseline answered
	Outputs     int          `json:"outputs"`      // the arm's successful outputs for those prompts, over all trials
	Identical   int          `json:"identical"`    // outputs identical to the baseline's as a whole
	IdenticalN  int          `json:"identical_at"` // outputs identical over the first AgreeTokens tokens
	Share       float64      `json:"share"`        // IdenticalN / Outputs
	Threshold   float64      `json:"threshold"`
	Invalid     bool         `json:"invalid"`
	Divergences []Divergence `json:"divergences,omitempty"` // the first per prompt
}

// Agree compares every successful output of arm, in every trial, with
// the baseline's first successful output for the same prompt. An output
// agrees over the first tokens (IdenticalN) when both sides generated at
// least tokens tokens and the arm's text starts with the baseline's text
// at that point (Sample.Text32), or when both ended for the same reason
// at the same token count with the same text: a baseline that generated
// nothing, or stopped short, agrees only with an arm that did the same.
// The arm is invalid when the share of its outputs that agree is below
// threshold (e.g. 0.9), or when no output could be compared. (Failed
// requests are not outputs; the bench invalidates an arm with failed
// requests on its own.)
func Agree(base, arm []Trial, threshold float64, tokens int) Agreement {
	b := firstOutputs(base)
	ag := Agreement{Prompts: len(b), Threshold: threshold}
	diverged := map[int]bool{}
	for _, t := range arm {
		for _, as := range t.Samples {
			bs, ok := b[as.Prompt]
			if !ok || as.Err != "" {
				continue
			}
			ag.Outputs++
			if bs.Text == as.Text && bs.CompletionTokens == as.CompletionTokens && bs.FinishReason == as.FinishReason {
				ag.Identical++
				ag.IdenticalN++
				continue
			}
			if bs.CompletionTokens >= tokens && as.CompletionTokens >= tokens && strings.HasPrefix(as.Text, bs.Text32) {
				ag.IdenticalN++
			}
			if !diverged[as.Prompt] {
				diverged[as.Prompt] = true
				off := firstDiff(bs.Text, as.Text)
				ag.Divergences = append(ag.Divergences, Divergence{Prompt: as.Prompt, Trial: t.Index, Concurrency: t.Concurrency, Offset: off, Base: around(bs.Text, off), Arm: around(as.Text, off)})
			}
		}
	}
	sort.SliceStable(ag.Divergences, func(i, j int) bool { return ag.Divergences[i].Prompt < ag.Divergences[j].Prompt })
	if ag.Outputs > 0 {
		ag.Share = float64(ag.IdenticalN) / float64(ag.Outputs)
	}
	ag.Invalid = ag.Outputs == 0 || ag.Share < threshold
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

// Add adds b's counts and divergences to a (the output checks of one arm
// at several concurrency levels): Prompts is the larger, Invalid is
// either's, Share is recomputed.
func (a *Agreement) Add(b Agreement) {
	a.Prompts = max(a.Prompts, b.Prompts)
	a.Outputs += b.Outputs
	a.Identical += b.Identical
	a.IdenticalN += b.IdenticalN
	a.Threshold = b.Threshold
	a.Invalid = a.Invalid || b.Invalid
	a.Divergences = append(a.Divergences, b.Divergences...)
	a.Share = 0
	if a.Outputs > 0 {
		a.Share = float64(a.IdenticalN) / float64(a.Outputs)
	}
}
