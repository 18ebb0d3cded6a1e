package nightly

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/history"
	"github.com/arpatch/arpatch/internal/lockfile"
)

// lockHistory takes the lock of history.path, so that one nightly at a
// time writes it, and returns its release. The error says that another
// nightly holds it, or why the lock cannot be taken.
func lockHistory(cfg *Config) (func(), error) {
	dbPath := cfg.Path(cfg.History.Path)
	unlock, err := history.Lock(dbPath)
	if err != nil {
		var held *lockfile.HeldError
		if errors.As(err, &held) {
			return nil, fmt.Errorf("another nightly is running on this history (%v); wait for it to finish", err)
		}
		return nil, fmt.Errorf("history.path %s: cannot take its lock: %w", dbPath, err)
	}
	return unlock, nil
}

// record is the last step: it stores what the night found in one
// transaction (history.Store.Record; res is the bench's result, nil when
// it ran to none). A write that fails makes the night an infrastructure
// failure (finish runs again), stores nothing of tonight, and marks the
// run's row failed as far as the history takes writes at all; a shared
// history's night is then kept whole in history.keep for the next
// nightly to send. The error is the failed write.
func (n *night) record(ctx context.Context, res *bench.Result) error {
	rep, cfg := n.rep, n.cfg
	rep.Seconds = n.o.now().Sub(rep.StartedAt).Seconds()
	rerr := n.store.Record(n.id, n.outcome(res))
	if rerr == nil {
		n.recorded = true
		return nil
	}
	n.historyFailed(rerr)
	rep.add(n.finish(ctx))
	if at := rep.History; history.IsURL(at) {
		keep := cfg.Path(cfg.History.Keep)
		kid, kerr := keepRun(keep, n.row, n.outcome(res))
		if kerr != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("tonight's run could not be kept in history.keep either: %v", kerr))
		} else {
			rep.History, rep.RunID = keep, kid
			rep.Errors = append(rep.Errors, fmt.Sprintf("tonight's run is kept in %s (history.keep) as run %d and sent to %s by the next nightly that reaches it", keep, kid, at))
		}
		n.o.logf("%s", rep.Errors[len(rep.Errors)-1])
	}
	if ferr := n.store.FinishRun(n.id, rep.Status, rep.ExitCode, rep.Verdict); ferr == nil {
		n.recorded = true
	}
	return rerr
}

// outcome is what the history stores of the night: the drift records
// (the drift rows' patches), the head and, with arms.commit = "head",
// the commit built and benched; the bench's arms and server versions
// when it ran to a result; and the report's checks, status, exit code
// and verdict as they stand.
func (n *night) outcome(res *bench.Result) history.Outcome {
	rep := n.rep
	out := history.Outcome{Drift: driftRecords(rep.Drift), UpstreamHead: rep.Head,
		Checks: rep.Checks, Status: rep.Status, ExitCode: rep.ExitCode, Verdict: rep.Verdict}
	if n.cfg.Arms.Commit == CommitHead && rep.Head != "" {
		out.SGLangCommit = rep.BuildCommit // what is built and benched
	}
	if res != nil {
		out.Env, out.Arms = benchEnv(res), armRecords(rep, res)
	}
	return out
}

// openHistory opens the run's history, history.path, and returns it with
// where it is (the file or URL that the report's run_id belongs to). A
// postgres:// history the nightly cannot open (the server is down,
// unreachable, refuses the login) loses no night: the run goes into the
// local history.keep instead, and kept says so, naming both (the run then
// exits 4, ExitInfra). When the server opens, the runs kept there by
// earlier nights are sent to it first (history.Send); what could not be
// sent stays kept, and sent says what happened. The error is a history
// that will not open at all.
func openHistory(cfg *Config) (store *history.Store, at string, kept error, sent string, err error) {
	target := cfg.Path(cfg.History.Path)
	store, err = history.Open(target)
	if !history.IsURL(target) {
		return store, target, nil, "", err
	}
	keep := cfg.Path(cfg.History.Keep)
	if err != nil {
		local, lerr := openKeep(keep)
		if lerr != nil {
			return nil, "", nil, "", fmt.Errorf("%v; and history.keep will not open either: %w", err, lerr)
		}
		return local, keep, keptError(err, keep, target), "", nil
	}
	return store, target, nil, sendKept(store, keep), nil
}

// keptError is why a run is in history.keep rather than in target.
func keptError(err error, keep, target string) error {
	return fmt.Errorf("%w; tonight's run is kept in %s (history.keep) and sent to %s by the next nightly that reaches it", err, keep, target)
}

// sendKept sends the runs kept in keep, if any, to store, and says what
// it did ("" when nothing was kept).
func sendKept(store *history.Store, keep string) string {
	if _, err := os.Stat(keep); err != nil {
		return "" // nothing was ever kept
	}
	local, err := history.Open(keep)
	if err != nil {
		return fmt.Sprintf("the runs kept in %v stay there: %v", keep, err)
	}
	defer func() { _ = local.Close() }() // its writes were committed or reported
	if _, err := local.MarkStale(); err != nil {
		return fmt.Sprintf("the runs kept in %v stay there: %v", keep, err)
	}
	ids, err := history.Send(local, store)
	msg := fmt.Sprintf("sent %d runs kept in %s to %s (now runs %v)", len(ids), keep, store.Path, ids)
	if err != nil {
		msg += fmt.Sprintf("; the rest stay there: %v", err)
	}
	if len(ids) == 0 && err == nil {
		return ""
	}
	return msg
}

// keepRun stores tonight's run, r with its outcome o, in the local
// history keep (history.keep) when the shared history failed to record
// it, so that the next nightly sends it; it returns its id there.
func keepRun(keep string, r history.Run, o history.Outcome) (int64, error) {
	local, err := openKeep(keep)
	if err != nil {
		return 0, err
	}
	id, err := local.BeginRun(r)
	if err == nil {
		err = local.Record(id, o)
	}
	if cerr := local.Close(); err == nil {
		err = cerr
	}
	return id, err
}

// openKeep opens (creating it and its directory if need be) the local
// history keep.
func openKeep(keep string) (*history.Store, error) {
	if err := os.MkdirAll(filepath.Dir(keep), 0o755); err != nil {
		return nil, fmt.Errorf("history.keep: %w", err)
	}
	return history.Open(keep)
}
