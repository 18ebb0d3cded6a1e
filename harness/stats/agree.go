package stats

import (
	"cmp"
	"fmt"
	"sort"
	"strconv"
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
	// Reason says how outputs with the same text differ: "finish reason
	// stop vs length at token 5", or "5 vs 7 tokens"; empty when the
	// texts differ.
	Reason string `json:"reason,omitempty"`
	// Beyond says the output agreed over the compared tokens and differs
	// only after them: it does not count against the arm.
	Beyond bool `json:"beyond_compared_window,omitempty"`
}

// String describes the divergence for a report line (without the arm
// and prompt): where it is, and the two texts there with every byte
// outside printable ASCII escaped, so that NFC and NFD, or an invisible
// character, do not print as the same text.
func (d Divergence) String() string {
	var b strings.Builder
	if d.Reason != "" {
		fmt.Fprintf(&b, "ends differently with the same text: %s", d.Reason)
	} else {
		fmt.Fprintf(&b, "diverges at byte %d", d.Offset)
	}
	if d.Beyond {
		b.WriteString(", beyond the compared window (it agrees over the compared tokens)")
	}
	fmt.Fprintf(&b, " (trial %d, concurrency %d)", d.Trial, d.Concurrency)
	if d.Reason == "" {
		fmt.Fprintf(&b, ": baseline %s, arm %s", Visible(d.Base), Visible(d.Arm))
	}
	return b.String()
}

// Visible quotes s with every byte that is not printable ASCII escaped:
// "caf\u00e9" and "cafe\u0301" differ on the page as in the bytes, and
// invalid UTF-8 shows as \x escapes.
func Visible(s string) string { return strconv.QuoteToASCII(s) }

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
// least tokens tokens and their texts are the same over the first
// tokens tokens' worth (Compared), or when both ended for the same reason
// at the same token count with the same text: a baseline that generated
// nothing, or stopped short, agrees only with an arm that did the same.
// The arm is invalid when the share of its outputs that agree is below
// threshold (e.g. 0.9), or when no output could be compared. (Failed
// requests are not outputs; the bench invalidates an arm with failed
// requests on its own.)
func Agree(base, arm []Trial, threshold float64, tokens int) Agreement {
	b := firstOutputs(base)
	ag := Agreement{Prompts: len(b), Threshold: threshold}
	diverged := map[int]int{} // prompt: index in ag.Divergences
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
			agrees := false
			if bs.CompletionTokens >= tokens && as.CompletionTokens >= tokens {
				n := Compared(bs, as, tokens)
				agrees = len(bs.Text) >= n && len(as.Text) >= n && bs.Text[:n] == as.Text[:n]
			}
			if agrees {
				ag.IdenticalN++
			}
			off := firstDiff(bs.Text, as.Text)
			d := Divergence{Prompt: as.Prompt, Trial: t.Index, Concurrency: t.Concurrency, Offset: off, Base: around(bs.Text, off), Arm: around(as.Text, off), Beyond: agrees}
			if bs.Text == as.Text {
				d.Base, d.Arm = "", ""
				if bs.FinishReason != as.FinishReason {
					d.Reason = fmt.Sprintf("finish reason %s vs %s at token %d", cmp.Or(bs.FinishReason, "none"), cmp.Or(as.FinishReason, "none"), as.CompletionTokens)
					if bs.CompletionTokens != as.CompletionTokens {
						d.Reason = fmt.Sprintf("finish reason %s at token %d vs %s at token %d", cmp.Or(bs.FinishReason, "none"), bs.CompletionTokens, cmp.Or(as.FinishReason, "none"), as.CompletionTokens)
					}
				} else {
					d.Reason = fmt.Sprintf("%d vs %d tokens (finish reason %s)", bs.CompletionTokens, as.CompletionTokens, cmp.Or(bs.FinishReason, "none"))
				}
			}
			// The first divergence per prompt, but one that counts against
			// the arm over one beyond the compared window.
			if i, seen := diverged[as.Prompt]; !seen {
				diverged[as.Prompt] = len(ag.Divergences)
				ag.Divergences = append(ag.Divergences, d)
			} else if ag.Divergences[i].Beyond && !d.Beyond {
				ag.Divergences[i] = d
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

// Compared is how many leading bytes of text the output check compares
// for outputs b and a that both generated at least tokens tokens: exactly
// the text of the first tokens tokens where either side has a chunk
// ending there; else the largest prefix either side vouches for as lying
// within its first tokens tokens (Sample.Within: the text at its last
// chunk boundary at or before that token). If the tokens agree, both
// texts start with the same text of the first tokens tokens, which is at
// least that long, so a correct arm never fails for how its chunks fall;
// a difference inside the last chunk that crosses the token on both
// sides cannot be placed before or after it and is not counted. Where
// neither side vouches for a byte (each sent all the compared tokens in
// its first chunk), the shorter first chunk is compared.
func Compared(b, a sglang.Sample, tokens int) int {
	blo, bhi := b.Within(tokens)
	alo, ahi := a.Within(tokens)
	if n := max(blo, alo); n > 0 {
		return n
	}
	return min(bhi, ahi)
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
