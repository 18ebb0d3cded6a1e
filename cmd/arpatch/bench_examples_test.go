package main

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/harness/bench"
)

// TestBenchExamplesRun checks that every bench example of the README and
// of `arpatch bench --help` is one that
// testdata/script/bench_examples.txtar runs as printed: the three say the
// same lines.
func TestBenchExamplesRun(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"arpatch", "bench", "--help"}, &out, &out); code != 0 {
		t.Fatalf("bench --help: exit %d\n%s", code, out.String())
	}
	script, err := os.ReadFile("testdata/script/bench_examples.txtar")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../docs/usage.md")
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	for _, l := range strings.Split(string(script), "\n") {
		if cmd, ok := strings.CutPrefix(l, "exec "); ok {
			ran[cmd] = true
		}
	}
	examples := func(text string) []string {
		var ex []string
		for _, l := range strings.Split(text, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "arpatch bench --") && strings.Contains(l, "{arpatch} fake-sglang") {
				ex = append(ex, l)
			}
		}
		return ex
	}
	help, doc := examples(out.String()), examples(string(readme))
	if len(help) != 3 || len(doc) != 3 {
		t.Fatalf("examples: %d in --help, %d in docs/usage.md, want 3 each", len(help), len(doc))
	}
	for i, l := range help {
		if !ran[l] {
			t.Errorf("the --help example %q is not run by bench_examples.txtar", l)
		}
		if doc[i] != l {
			t.Errorf("docs/usage.md example %d:\n%s\n--help:\n%s", i, doc[i], l)
		}
	}
	// No other bench example in --help: the GPU one is prose, not an
	// example line.
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "      ") && strings.HasPrefix(strings.TrimSpace(l), "arpatch bench ") && !strings.Contains(l, "{arpatch} fake-sglang") && !strings.Contains(l, "[") {
			t.Errorf("--help example that is not run: %q", l)
		}
	}
}

// An --arm value keeps its commas where no key follows them: between
// env. keys they separate, inside launch-cmd= and args= values they stay.
func TestParseArm(t *testing.T) {
	arms := map[string]*bench.Arm{}
	for _, spec := range []string{
		"algo1:env.SGLANG_CUSTOM_ALLREDUCE_ALGO=1stage,env.SGLANG_FORCE_CUSTOM_AR_PCIE=1",
		"graphs:args=--cuda-graph-bs 1,2,4,8 --tp 8,env.NCCL_ALGO=Ring,LL",
		"wrap:launch-cmd=serve --port {port} --gpus 0,1,2,3,python=/venv/bin/python",
	} {
		if _, err := parseArm(spec, arms); err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
	}
	if a := arms["algo1"]; len(arms) != 3 || a.Env["SGLANG_CUSTOM_ALLREDUCE_ALGO"] != "1stage" || a.Env["SGLANG_FORCE_CUSTOM_AR_PCIE"] != "1" || len(a.Env) != 2 {
		t.Errorf("algo1: %+v (arms %v)", a, arms)
	}
	if a := arms["graphs"]; strings.Join(a.Args, " ") != "--cuda-graph-bs 1,2,4,8 --tp 8" || a.Env["NCCL_ALGO"] != "Ring,LL" {
		t.Errorf("graphs: %+v", a)
	}
	if a := arms["wrap"]; a.LaunchCmd != "serve --port {port} --gpus 0,1,2,3" || a.Python != "/venv/bin/python" {
		t.Errorf("wrap: %+v", a)
	}
	// args= splits as sh does: quotes keep a value with spaces one word.
	if _, err := parseArm(`q:args=--json-model-override-args '{"a": 1}' --name "two words" a\ b {x,y} ~/m '$X' "say \"hi\" \n"`, arms); err != nil {
		t.Fatal(err)
	}
	if got := arms["q"].Args; !reflect.DeepEqual(got, []string{"--json-model-override-args", `{"a": 1}`, "--name", "two words", "a b", "{x,y}", "~/m", "$X", `say "hi" \n`}) {
		t.Errorf("quoted args: %q", got)
	}
	for spec, want := range map[string]string{
		"x:colour=red":   `unknown key "colour"`,
		"x:nokey":        `--arm x: "nokey" is not key=val`,
		":env.A=1":       "want NAME:key=val",
		"x:env.A=,url=u": "env.A= was given an empty value",
		// An empty variable name no longer swallows the next key.
		"x:env.=1,env.B=2":    `env.: "" is not an environment variable name`,
		"x:env.A=1,env.A B=2": `env.A B: "A B" is not an environment variable name`,
		"x y:env.A=1":         `--arm "x y": an arm's name is lower case letters`,
		"Pcie:env.A=1":        `--arm "Pcie": an arm's name`,
		// One rule for commas: a leading, doubled or trailing one is refused.
		"x:,env.A=1":         `"" is not key=val`,
		"x:env.A=1,":         "env.A=1, ends with a comma",
		"x:env.A=1,,env.B=2": "env.A=1, ends with a comma",
		"x":                  `--arm "x": want NAME:key=val[,key=val], e.g. --arm 'algo1:env.SGLANG_CUSTOM_ALLREDUCE_ALGO=1stage'`,
		"x:":                 `--arm "x:": want NAME:key=val`,
		"x:url=notaurl":      "url=notaurl is not a server URL: give http://HOST:PORT (e.g. http://127.0.0.1:30000)",
		// Without a scheme, the example is the value behind http://, as
		// for --url (one check, bench.CheckURL).
		"x:url=localhost:80":                                 "url=localhost:80 is not a server URL: give http://HOST:PORT (e.g. http://localhost:80)",
		"x:url=127.0.0.1:39111":                              "url=127.0.0.1:39111 is not a server URL: give http://HOST:PORT (e.g. http://127.0.0.1:39111)",
		"x:url=http://h:99999":                               "port 99999 is not 1 to 65535",
		"x:url=http://h:1,env.SGLANG_FORCE_CUSTOM_AR_PCIE=1": "url= attaches to a running server, so env.VAR= would not apply",
		"x:url=http://h:1,args=--tp 2":                       "so args= would not apply",
		"x:launch-cmd=serve --port {port},args=--tp 2":       "args= are server arguments for the built-in launch",
		"x:args=--x $HOME":                                   "$HOME: arpatch does not expand it",
		"x:args=--x 'unclosed":                               "args=--x 'unclosed: ",
	} {
		if _, err := parseArm(spec, map[string]*bench.Arm{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", spec, err, want)
		}
	}
}
