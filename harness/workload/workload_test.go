package workload

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuiltin(t *testing.T) {
	ps := Builtin()
	if len(ps) != 32 {
		t.Fatalf("%d built-in prompts, want 32", len(ps))
	}
	seen := map[string]bool{}
	for i, p := range ps {
		if strings.TrimSpace(p) == "" || seen[p] {
			t.Errorf("prompt %d empty or repeated: %q", i, p)
		}
		seen[p] = true
	}
}

func TestLoadJSONL(t *testing.T) {
	p := write(t, "p.jsonl", "{\"prompt\": \"a b\"}\n\n{\"text\": \"c d\", \"id\": 7}\n")
	got, err := Load(p)
	if err != nil || !reflect.DeepEqual(got, []string{"a b", "c d"}) {
		t.Errorf("Load = %q, %v", got, err)
	}
	for body, want := range map[string]string{
		"{\"prompt\": \"a\"}\n{not json\n":   "p.jsonl:2: ",
		"{\"prompt\": \"a\"}\n{\"id\": 1}\n": "p.jsonl:2: no \"prompt\" or \"text\" field",
		"\n\n":                               "p.jsonl: no prompts",
	} {
		if _, err := Load(write(t, "p.jsonl", body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", body, err, want)
		}
	}
	// A missing file: the error names the file and no flag (the caller
	// names --prompts or bench.workload).
	nope := filepath.Join(t.TempDir(), "nope.jsonl")
	if _, err := Load(nope); err == nil || err.Error() != "open "+nope+": no such file or directory" {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoadShareGPT(t *testing.T) {
	p := write(t, "sg.json", ` [
 {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "first"}, {"from": "gpt", "value": "x"}, {"from": "human", "value": "second"}]},
 {"conversations": [{"from": "gpt", "value": "only a reply"}]},
 {"conversations": [{"from": "user", "value": "third"}]}
]`)
	got, err := Load(p)
	if err != nil || !reflect.DeepEqual(got, []string{"first", "third"}) {
		t.Errorf("Load = %q, %v", got, err)
	}
	if _, err := Load(write(t, "sg.json", `[{"conversations": [{"from": "gpt", "value": "x"}]}]`)); err == nil || !strings.Contains(err.Error(), "no human turns found") {
		t.Errorf("no human turns: %v", err)
	}
	if _, err := Load(write(t, "sg.json", `[{"conversations": 3}]`)); err == nil || !strings.Contains(err.Error(), "not ShareGPT JSON") {
		t.Errorf("bad shape: %v", err)
	}
}

func TestTake(t *testing.T) {
	ps := []string{"a", "b", "c"}
	if got := Take(ps, 7); !reflect.DeepEqual(got, []string{"a", "b", "c", "a", "b", "c", "a"}) {
		t.Errorf("Take 7 = %q", got)
	}
	if got := Take(ps, 2); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("Take 2 = %q", got)
	}
	if got := Take(ps, 0); len(got) != 3 {
		t.Errorf("Take 0 = %q, want all", got)
	}
}

// TestIdentity: the name and a digest of every prompt in order, so other
// content under one name, or the same prompts split otherwise, differ.
func TestIdentity(t *testing.T) {
	id := Identity("p.jsonl", []string{"a", "b"})
	if !strings.HasPrefix(id, "p.jsonl@sha256:") || len(id) != len("p.jsonl@sha256:")+12 {
		t.Fatalf("Identity = %q", id)
	}
	for _, other := range [][]string{{"a", "c"}, {"b", "a"}, {"ab"}, {"a", "b", "a"}} {
		if Identity("p.jsonl", other) == id {
			t.Errorf("%q has the identity of [a b]", other)
		}
	}
	if Identity("p.jsonl", []string{"a", "b"}) != id {
		t.Error("Identity is not deterministic")
	}
}
