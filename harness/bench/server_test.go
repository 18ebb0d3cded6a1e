package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// The caller's environment does not reach an arm through the variables
// the arms control; what an arm sets is its own, and the result records
// the effective SGLANG_/NCCL_/CUDA_/PYTORCH_ variables.
func TestArmEnvironment(t *testing.T) {
	o := Options{Arms: []Arm{{Name: "baseline"}, {Name: "pcie", Env: map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "MY_KNOB": "2"}}},
		Env: []string{"PATH=/bin", "SGLANG_FORCE_CUSTOM_AR_PCIE=1", "SGLANG_CUSTOM_ALLREDUCE_ALGO=2stage", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=9", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=9", "MY_KNOB=7",
			"NCCL_DEBUG=INFO", "CUDA_VISIBLE_DEVICES=0,1", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "SGLANG_LOG_LEVEL=info", "HOME=/root"}}
	base := o.armEnv(o.Arms[0])
	for _, kv := range base {
		for _, k := range []string{"SGLANG_FORCE_CUSTOM_AR_PCIE=", "SGLANG_CUSTOM_ALLREDUCE_ALGO=", "SGLANG_PCIE_CUSTOM_AR_MAX_BYTES=", "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES=", "MY_KNOB="} {
			if strings.HasPrefix(kv, k) {
				t.Errorf("baseline inherits %s", kv)
			}
		}
	}
	if !slices.Contains(base, "PATH=/bin") || !slices.Contains(base, "NCCL_DEBUG=INFO") {
		t.Errorf("baseline env %v", base)
	}
	pcie := o.armEnv(o.Arms[1])
	if !slices.Contains(pcie, "SGLANG_FORCE_CUSTOM_AR_PCIE=1") || !slices.Contains(pcie, "MY_KNOB=2") || slices.Contains(pcie, "MY_KNOB=7") {
		t.Errorf("pcie env %v", pcie)
	}
	rec := recordedEnv(pcie)
	want := map[string]string{"SGLANG_FORCE_CUSTOM_AR_PCIE": "1", "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1",
		"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "SGLANG_LOG_LEVEL": "info"}
	if len(rec) != len(want) {
		t.Errorf("recorded %v, want %v", rec, want)
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("recorded %s=%q, want %q", k, rec[k], v)
		}
	}
}

func TestArgv(t *testing.T) {
	o := Options{Model: "/m", DraftModel: "/d", TP: 8, SpecAlgorithm: "EAGLE3", SpecSteps: 3, SpecTopK: 1, SpecDraftTokens: 4, Host: "127.0.0.1"}
	got := strings.Join(o.Argv(Arm{Name: "pcie", Python: "/venv/bin/python", Args: []string{"--cuda-graph-max-bs", "8"}}, 31000), " ")
	want := "/venv/bin/python -m sglang.launch_server --model-path /m --host 127.0.0.1 --port 31000 --tp-size 8 --speculative-algorithm EAGLE3 --speculative-draft-model-path /d --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --cuda-graph-max-bs 8"
	if got != want {
		t.Errorf("argv:\n%s\nwant\n%s", got, want)
	}
	if got := o.Argv(Arm{Name: "x", LaunchCmd: "serve --port {port} --tp {tp} --arm {arm}"}, 9); strings.Join(got, " ") != "sh -c serve --port 9 --tp 8 --arm x" {
		t.Errorf("template: %q", got)
	}
	// A model path with a space and a ';' stays one argument.
	o.Model = "/m/my model;touch /tmp/x"
	if got := o.Argv(Arm{Name: "x", LaunchCmd: "serve --model {model}"}, 9); got[2] != `serve --model '/m/my model;touch /tmp/x'` {
		t.Errorf("quoted template: %q", got)
	}
	for _, arms := range [][]Arm{
		{{Name: "a", URL: "http://localhost:8000/"}, {Name: "b", URL: "http://127.0.0.1:8000"}},
		{{Name: "a", LaunchCmd: "serve --port 30000"}},
	} {
		if err := (Options{Arms: arms}).CheckArms(); err == nil {
			t.Errorf("arms %+v accepted", arms)
		}
	}
	if SameServer("http://h:8000", "http://h:8001") || !SameServer("http://H:80/", "http://h") {
		t.Error("SameServer")
	}
	bad := Options{Arms: []Arm{{Name: "a"}}, Prompts: []string{"x"}}
	if _, err := Run(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "needs a server: pass --model") {
		t.Errorf("no model: %v", err)
	}
}
