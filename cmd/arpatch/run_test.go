package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/shell"

	"github.com/arpatch/arpatch/checkout"
	"github.com/arpatch/arpatch/internal/testrepo"
	"github.com/arpatch/arpatch/patches"
)

// The run functions, called as gh's tests call xRun: options built
// directly, the streams buffers.

// bufs returns streams writing into two buffers.
func bufs() (streams, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return streams{In: strings.NewReader(""), Out: &out, Err: &errb}, &out, &errb
}

func TestRecipesListRun(t *testing.T) {
	s, out, _ := bufs()
	if err := recipesListRun(context.Background(), struct{}{}, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"baseline   Upstream SGLang", "           series (none) at ", "\npcie       ", "           series pcie at "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("recipes list lacks %q:\n%s", want, out)
		}
	}
}

func TestStatusAndRevertRun(t *testing.T) {
	src := readmeRepo(t)
	cat, err := patches.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	// No apply state, a clean tree: status 0, revert has nothing to do.
	s, out, _ := bufs()
	if err := statusRun(context.Background(), statusOptions{Src: src, Catalog: cat}, s); err != nil {
		t.Errorf("status of a clean tree: %v", err)
	}
	if !strings.Contains(out.String(), "state    none: arpatch has not applied anything here") {
		t.Errorf("status:\n%s", out)
	}
	s, out, _ = bufs()
	if err := revertRun(context.Background(), checkout.RevertOptions{Src: src, Catalog: cat}, s); err != nil || out.String() != src+": no apply state; nothing to revert\n" {
		t.Errorf("revert: %v\n%s", err, out)
	}
	// An uncommitted change: status exits 1, naming it; --json says so too.
	if err := testrepo.WriteFiles(src, map[string]string{"README": "y\n"}); err != nil {
		t.Fatal(err)
	}
	s, out, _ = bufs()
	err = statusRun(context.Background(), statusOptions{Src: src, Catalog: cat}, s)
	if exitCode(err) != exitFailure || !strings.Contains(out.String(), "  uncommitted: ") || !strings.Contains(out.String(), "README") {
		t.Errorf("status of a changed tree: exit %d\n%s", exitCode(err), out)
	}
	s, out, _ = bufs()
	err = statusRun(context.Background(), statusOptions{Src: src, Catalog: cat, JSON: true}, s)
	if exitCode(err) != exitFailure || !strings.HasPrefix(out.String(), "{") {
		t.Errorf("status --json of a changed tree: exit %d\n%s", exitCode(err), out)
	}
}

func TestHistoryRunsNeedTheirDB(t *testing.T) {
	db := filepath.Join(t.TempDir(), "nosuch.db")
	s, _, _ := bufs()
	err := historyListRun(context.Background(), historyListOptions{DB: historyTarget{db, "db"}, Limit: 3}, s)
	if err == nil || !strings.HasPrefix(err.Error(), "--db "+db+": ") || exitCode(err) != exitFailure {
		t.Errorf("history list of a missing db: %v", err)
	}
}

// An apply that another live arpatch is still writing (its state marked
// incomplete, the checkout's lock held by its pid) is not an interrupted
// one: status names the pid and prints no revert, which the lock refuses.
func TestStatusOfAnApplyAtWork(t *testing.T) {
	var out bytes.Buffer
	printStatus(&out, &checkout.StatusReport{Src: "sg", Head: "c1", Holder: 4242, State: &checkout.State{Commit: "c1", Incomplete: true}})
	want := "checkout sg\nHEAD     c1\nBUSY: arpatch pid 4242 holds this checkout's lock (.git/arpatch/lock): an apply, revert or build is in progress here; run `arpatch status --src sg` again when it ends\n"
	if out.String() != want {
		t.Errorf("status:\n%s\nwant:\n%s", out.String(), want)
	}
}

// A postgres:// --db (or --history) goes to the server, not to a file
// check: a server that does not answer is the error, naming the URL.
func TestHistoryRunsTakeAURL(t *testing.T) {
	u := "postgres://arpatch@127.0.0.1:1/arpatch?connect_timeout=2"
	for _, flag := range []string{"--db", "--history"} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"arpatch", "history", "list", flag, u}, &out, &errb)
		if code != exitFailure || !strings.Contains(errb.String(), "history "+u+": cannot reach the server") {
			t.Errorf("history list %s %s: exit %d, %s", flag, u, code, errb.String())
		}
	}
}

// The fleet's commands in docs/nightly.md run as printed but for the
// server's host, which here is a port nothing listens on (no lookup
// leaves this machine): they reach the server, and say it does not
// answer. The block exports the URL as $HISTORY_URL first, as a shell
// reads it (history.txtar runs the lines on a real server).
func TestFleetDocCommands(t *testing.T) {
	b, err := os.ReadFile("../../docs/nightly.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "## A fleet")
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(doc[i:])
	if i < 0 || m == nil {
		t.Fatal("docs/nightly.md has no fleet section with a sh block")
	}
	lines := strings.Split(strings.TrimSpace(m[1]), "\n")
	const want = "export HISTORY_URL=postgres://arpatch@db.internal/arpatch"
	if len(lines) != 3 || lines[0] != want {
		t.Fatalf("fleet commands: %q, want %q and two commands", lines, want)
	}
	url := strings.Replace(strings.TrimPrefix(want, "export HISTORY_URL="), "db.internal", "127.0.0.1:1", 1) + "?connect_timeout=2"
	env := func(name string) string {
		if name == "HISTORY_URL" {
			return url
		}
		return ""
	}
	for _, line := range lines[1:] {
		args, err := shell.Fields(line, env)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range args {
			if a == "box-a.svg" {
				args[i] = filepath.Join(t.TempDir(), a)
			}
		}
		if !slices.Contains(args, url) {
			t.Fatalf("%s: names no $HISTORY_URL (%q)", line, args)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		if code != exitFailure || !strings.Contains(errb.String(), ": cannot reach the server: ") {
			t.Errorf("%s: exit %d, %s", line, code, errb.String())
		}
	}
}
