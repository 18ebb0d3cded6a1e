// Package workload provides the prompts a benchmark sends: a built-in set
// of 32 prompts of varied length and kind (written for arpatch), or a
// user's file in JSONL ({"prompt": ...} or {"text": ...} per line) or
// ShareGPT JSON (the first human turn of each conversation).
package workload

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/arpatch/arpatch/internal/digest"
)

//go:embed prompts.jsonl
var builtin []byte

// Builtin returns the built-in prompts.
func Builtin() []string {
	p, err := parseJSONL("prompts.jsonl", builtin)
	if err != nil {
		panic(err) // the embedded file is part of arpatch
	}
	return p
}

// Load reads a prompt file: ShareGPT JSON when it starts with '[', else
// JSONL. Errors name the file and line; the caller names the flag or key
// (--prompts, bench.workload) that gave path.
func Load(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '[' {
		return parseShareGPT(path, t)
	}
	return parseJSONL(path, b)
}

func parseJSONL(name string, b []byte) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n := 0
	for sc.Scan() {
		n++
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		var rec struct {
			Prompt string `json:"prompt"`
			Text   string `json:"text"`
		}
		if err := json.Unmarshal(l, &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, n, err)
		}
		p := rec.Prompt
		if p == "" {
			p = rec.Text
		}
		if strings.TrimSpace(p) == "" {
			return nil, fmt.Errorf("%s:%d: no \"prompt\" or \"text\" field", name, n)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts", name)
	}
	return out, sc.Err()
}

func parseShareGPT(name string, b []byte) ([]string, error) {
	var convs []struct {
		Conversations []struct {
			From  string `json:"from"`
			Value string `json:"value"`
		} `json:"conversations"`
	}
	if err := json.Unmarshal(b, &convs); err != nil {
		return nil, fmt.Errorf("%s: not ShareGPT JSON: %v", name, err)
	}
	var out []string
	for _, c := range convs {
		for _, turn := range c.Conversations {
			if (turn.From == "human" || turn.From == "user") && strings.TrimSpace(turn.Value) != "" {
				out = append(out, turn.Value)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no human turns found", name)
	}
	return out, nil
}

// Take returns n prompts, cycling through ps when n is larger.
func Take(ps []string, n int) []string {
	if n <= 0 || n == len(ps) {
		return ps
	}
	out := make([]string, n)
	for i := range out {
		out[i] = ps[i%len(ps)]
	}
	return out
}

// Identity names a workload for reports and history keys: name (recipes.BuiltinWorkload
// or the file's path as given) and the SHA-256 of the prompts, cut to
// digest.ShortLen hex digits, so that a file edited in place, or another
// file under the same name, is told apart: "builtin@sha256:3f1c0a9e2b7d".
// The digest covers every prompt in order (each one length-prefixed), not
// how many a run takes (report.Settings.Prompts records that).
func Identity(name string, prompts []string) string {
	var b bytes.Buffer
	for _, p := range prompts {
		fmt.Fprintf(&b, "%d:%s\n", len(p), p)
	}
	return name + "@" + digest.Short("sha256:"+digest.SHA256Hex(b.Bytes()))
}
