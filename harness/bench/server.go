package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arpatch/arpatch/harness/server"
	"github.com/arpatch/arpatch/harness/sglang"
	"github.com/arpatch/arpatch/harness/stats"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/internal/pyenv"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/internal/textfmt"
)

// ControlledEnv are the variables the recipes' arms set to choose the
// allreduce path. They are removed from the inherited environment of
// every launched arm that does not set them itself, as is every variable
// any arm sets: exported in the shell, SGLANG_FORCE_CUSTOM_AR_PCIE=1
// would otherwise run the baseline patched too.
// They are the variables the pcie series and sgl-kernel read (package
// tune names them).
var ControlledEnv = append([]string{tune.EnvAlgo}, tune.Variables...)

// RecordedEnvPrefixes are the prefixes of the variables the result
// records per arm (ArmResult.Env): those that change SGLang, NCCL, CUDA
// or PyTorch.
var RecordedEnvPrefixes = []string{"SGLANG_", "NCCL_", "CUDA_", "PYTORCH_"}

// Argv returns the launch command of an arm on a port: its LaunchCmd
// template through sh, or python -m sglang.launch_server with the model,
// the speculative settings and TP.
func (o *Options) Argv(a Arm, port int) []string {
	if a.LaunchCmd != "" {
		// Values are shell-quoted: a model path with a space or a ';' is
		// one argument, never a command.
		q := shellq.Quote
		self := o.Self
		if self == "" {
			self = "arpatch"
		}
		r := strings.NewReplacer("{port}", strconv.Itoa(port), "{host}", q(o.Host), "{model}", q(o.Model),
			"{draft}", q(o.DraftModel), "{tp}", strconv.Itoa(o.TP), "{arm}", q(a.Name), "{arpatch}", q(self))
		return []string{"sh", "-c", r.Replace(a.LaunchCmd)}
	}
	py := pyenv.Or(a.Python)
	argv := []string{py, "-m", "sglang.launch_server", "--model-path", o.Model, "--host", o.Host, "--port", strconv.Itoa(port)}
	if o.TP > 0 {
		argv = append(argv, "--tp-size", strconv.Itoa(o.TP))
	}
	if o.SpecAlgorithm != "" && !strings.EqualFold(o.SpecAlgorithm, "none") {
		argv = append(argv, "--speculative-algorithm", o.SpecAlgorithm, "--speculative-draft-model-path", o.DraftModel,
			"--speculative-num-steps", strconv.Itoa(o.SpecSteps), "--speculative-eagle-topk", strconv.Itoa(o.SpecTopK),
			"--speculative-num-draft-tokens", strconv.Itoa(o.SpecDraftTokens))
	}
	return append(argv, a.Args...)
}

// armEnv is the environment a launched arm runs in: Options.Env without
// ControlledEnv and without every variable any arm sets, then the arm's
// own variables.
func (o *Options) armEnv(a Arm) []string {
	drop := map[string]bool{}
	for _, k := range ControlledEnv {
		drop[k] = true
	}
	for _, b := range o.Arms {
		for k := range b.Env {
			drop[k] = true
		}
	}
	var env []string
	for _, kv := range o.Env {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		env = append(env, k+"="+a.Env[k])
	}
	return env
}

// recordedEnv picks the variables with RecordedEnvPrefixes from env (the
// last of a repeated name wins, as exec does).
func recordedEnv(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range RecordedEnvPrefixes {
			if strings.HasPrefix(k, p) {
				m[k] = v
			}
		}
	}
	return m
}

func (o *Options) start(ctx context.Context, a Arm, trial int) (*server.Proc, error) {
	log := filepath.Join(o.LogDir, fmt.Sprintf("server-%s-trial%d.log", a.Name, trial))
	if o.Starting != nil {
		o.Starting(a.Name, trial, log)
	}
	return server.StartOnFreePort(ctx, o.Host, func(port int) server.Spec {
		return server.Spec{
			Name: a.Name, Argv: o.Argv(a, port), Env: o.armEnv(a), Host: o.Host, Port: port,
			LogPath: log, ReadyTimeout: o.ReadyTimeout,
		}
	})
}

func launching(o Options) bool {
	for _, a := range o.Arms {
		if a.URL == "" {
			return true
		}
	}
	return false
}

// CheckURL refuses a server URL that is not http(s)://HOST[:PORT][/PATH]:
// "notaurl" would fail only when the run reaches it, as a dead server.
// Every refusal says "is not a server URL: give http://HOST:PORT", with
// s itself behind http:// as the example when it lacks a scheme
// ("127.0.0.1:30000", which url.Parse cannot even read).
func CheckURL(s string) error {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		eg := "http://127.0.0.1:30000"
		if t := strings.TrimSpace(s); t != "" && !strings.Contains(t, "://") {
			if v, err := url.Parse("http://" + t); err == nil && v.Host != "" && v.Port() != "" {
				eg = v.String()
			}
		}
		return fmt.Errorf("%s is not a server URL: give http://HOST:PORT (e.g. %s)", s, eg)
	}
	if u.Port() != "" {
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%s: port %s is not 1 to 65535", s, u.Port())
		}
	}
	return nil
}

// SameServer reports whether two server URLs name one server: scheme and
// host compared without case, localhost as 127.0.0.1, default ports and a
// trailing slash ignored.
func SameServer(a, b string) bool {
	norm := func(s string) string {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" {
			return strings.TrimRight(strings.ToLower(s), "/")
		}
		host, port := strings.ToLower(u.Hostname()), u.Port()
		if host == "localhost" || host == "::1" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
		}
		return strings.ToLower(u.Scheme) + "://" + host + ":" + port + strings.TrimRight(u.Path, "/")
	}
	return a != "" && b != "" && norm(a) == norm(b)
}

// url2port is the port of a server URL.
func url2port(u string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil || pu.Port() == "" {
		return "", fmt.Errorf("no port in %q", u)
	}
	return pu.Port(), nil
}

// serverDeathWait bounds how long a trial with failed requests waits for
// its launched server's process to end, when the server no longer answers
// /health_generate, to report a death (with its log) rather than failed
// requests. A server that answers is alive: no wait.
var serverDeathWait = 5 * time.Second

// deathWait returns how long to wait for a launched server with failed
// requests to exit: 0 when it still answers /health_generate within a
// second, else serverDeathWait (Proc.Exited returns as soon as it exits).
func (o *Options) deathWait(ctx context.Context, c *sglang.Client) time.Duration {
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if c.Health(hctx) == nil {
		return 0
	}
	return serverDeathWait
}

// answers reports whether the server answers /health_generate within a
// second.
func (o *Options) answers(ctx context.Context, c *sglang.Client) bool {
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Health(hctx) == nil
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// escapeWait is how long a stopped server's port may keep answering
// before it counts as a process that escaped its group.
var escapeWait = 2 * time.Second

// stoppedAnswering is the infrastructure failure of a server that no
// longer answers after some of a trial's requests failed: its port, how
// many of the arm's requests it had answered, the trial's failures and
// the first, and for a launched one the process that still runs and the
// log.
func stoppedAnswering(ar *ArmResult, p *server.Proc, url string, trial stats.Trial, level int) error {
	answered, failed := answeredBy(ar, trial), 0
	first := ""
	for _, x := range trial.Samples {
		if x.Err != "" {
			failed++
			if first == "" {
				first = x.Err
			}
		}
	}
	where := "the server at " + url
	if u, err := url2port(url); err == nil {
		where = "the server on port " + u
	}
	msg := fmt.Sprintf("arm %s: %s stopped answering after %s (trial %d, concurrency %d: %d of %d requests failed, the first: %s; /health_generate does not answer %s later)",
		ar.Arm.Name, where, textfmt.Plural(answered, "answered request", "answered requests"), trial.Index, level, failed, len(trial.Samples), first, serverDeathWait)
	if p != nil {
		msg += fmt.Sprintf("; its launch command (pid %d) still runs, so it outlived the server it started (a wrapper such as sh -c 'server & ...'): see %s", p.PID(), p.Spec.LogPath)
	}
	return errors.New(msg)
}

// answeredBy counts the arm's requests that were answered, in its trials
// so far and in trial.
func answeredBy(ar *ArmResult, trial stats.Trial) int {
	n := 0
	for _, t := range append(append([]stats.Trial(nil), ar.Trials...), trial) {
		for _, x := range t.Samples {
			if x.Err == "" {
				n++
			}
		}
	}
	return n
}
