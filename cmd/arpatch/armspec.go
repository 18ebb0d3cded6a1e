package main

import (
	"fmt"
	"maps"
	"strings"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/tune"
	"github.com/arpatch/arpatch/internal/lazyre"
	"github.com/arpatch/arpatch/internal/shellq"
	"github.com/arpatch/arpatch/recipes"
)

// armFlag collects --arm values whole: urfave/cli would split a slice
// flag's value at every comma, and an arm's value holds commas between
// its keys and within launch-cmd= and args= values.
type armFlag []string

func (a *armFlag) Set(v string) error { *a = append(*a, v); return nil }

func (a *armFlag) String() string { return strings.Join(*a, " ") }

func (a *armFlag) Get() any { return []string(*a) }

// armKey matches where a new key starts after a comma in an --arm value:
// a known key, or env. with anything up to '=' (a bad variable name is
// then refused, not swallowed into the value before it).
var armKey = lazyre.New(`^(python|url|launch-cmd|args|env\.[^=,]*)=`)

// parseArm reads "NAME:key=val,key=val". A comma ends a value only when
// a key (python, url, launch-cmd, args, env.VAR) follows it, so
// launch-cmd= and args= values may hold commas; no value ends with a
// comma, and none is empty (one rule for a leading, doubled or trailing
// comma). NAME is a recipe arm's name (lower case letters, digits, '_',
// '.', '-'): it names benchfmt sub-benchmarks and log files. args= is
// split into words as sh splits them (quotes and backslashes; no
// $VARIABLES), and applies only to the built-in launch: with
// launch-cmd= the arguments belong in the command. url= attaches to a
// running server: it must be an http(s) URL, and takes none of the keys
// that shape a launch (env., args, python, launch-cmd).
func parseArm(spec string, into map[string]*bench.Arm) (string, error) {
	name, rest, _ := strings.Cut(spec, ":")
	name = strings.TrimSpace(name)
	if name == "" || strings.TrimSpace(rest) == "" {
		// An arm with nothing set would silently repeat the baseline.
		return "", fmt.Errorf("--arm %q: want NAME:key=val[,key=val], e.g. --arm 'algo1:env.%s=1stage'", spec, tune.EnvAlgo)
	}
	if !recipes.ValidName(name) {
		return "", fmt.Errorf("--arm %q: an arm's name is lower case letters, digits, '_', '.' and '-', starting with a letter or digit (it names benchmark lines and log files)", name)
	}
	kvs := splitArmKeys(rest)
	set := map[string]bool{}
	a := bench.Arm{Name: name}
	if old := into[name]; old != nil {
		a = *old
		a.Env = maps.Clone(old.Env)
	}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", fmt.Errorf("--arm %s: %q is not key=val", name, kv)
		}
		if strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("--arm %s: %s= was given an empty value", name, k)
		}
		if strings.HasSuffix(v, ",") {
			return "", fmt.Errorf("--arm %s: %s=%s ends with a comma: a comma separates keys, and no key follows it (drop it)", name, k, v)
		}
		set[strings.SplitN(k, ".", 2)[0]] = true
		if err := setArmKey(&a, name, k, v); err != nil {
			return "", err
		}
	}
	if set["url"] {
		for _, k := range []string{"env", "args", "python", "launch-cmd"} {
			if set[k] {
				what := k + "="
				if k == "env" {
					what = "env.VAR="
				}
				return "", fmt.Errorf("--arm %s: url= attaches to a running server, so %s would not apply (arpatch launches nothing for it): start that server with it, or drop url= and let arpatch launch the arm", name, what)
			}
		}
	}
	if set["args"] && set["launch-cmd"] {
		return "", fmt.Errorf("--arm %s: args= are server arguments for the built-in launch (python -m sglang.launch_server); with launch-cmd= put them in the command", name)
	}
	into[name] = &a
	return name, nil
}

// splitArmKeys splits an --arm's "key=val,key=val" at each comma that a
// key (armKey) follows, so that a value may hold commas.
func splitArmKeys(rest string) []string {
	var kvs []string
	for rest != "" {
		end := len(rest)
		for i := strings.IndexByte(rest, ','); i >= 0; {
			if armKey().MatchString(rest[i+1:]) {
				end = i
				break
			}
			j := strings.IndexByte(rest[i+1:], ',')
			if j < 0 {
				break
			}
			i += 1 + j
		}
		kvs = append(kvs, rest[:end])
		rest = strings.TrimPrefix(rest[end:], ",")
	}
	return kvs
}

// setArmKey sets key k of arm a (named name) to v: python, url (an http(s)
// URL), launch-cmd, args (split as sh splits words) or env.VAR (a valid
// name). Errors name the arm and the key.
func setArmKey(a *bench.Arm, name, k, v string) error {
	switch {
	case k == "python":
		a.Python = v
	case k == "url":
		if err := bench.CheckURL(v); err != nil {
			return fmt.Errorf("--arm %s: url=%v", name, err)
		}
		a.URL = v
	case k == "launch-cmd":
		a.LaunchCmd = v
	case k == "args":
		words, err := shellq.Split(v)
		if err != nil {
			return fmt.Errorf("--arm %s: args=%s: %v", name, v, err)
		}
		a.Args = words
	case strings.HasPrefix(k, "env."):
		vr := strings.TrimPrefix(k, "env.")
		if !recipes.ValidEnvName(vr) {
			return fmt.Errorf("--arm %s: env.%s: %q is not an environment variable name (letters, digits and '_', not starting with a digit)", name, vr, vr)
		}
		if a.Env == nil {
			a.Env = map[string]string{}
		}
		a.Env[vr] = v
	default:
		return fmt.Errorf("--arm %s: unknown key %q (python, url, launch-cmd, args, env.VAR)", name, k)
	}
	return nil
}
