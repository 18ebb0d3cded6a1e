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
	"github.com/arpatch/arpatch/internal/textfmt"
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
		return nil, fmt.Errorf("history.path %s: cannot take its lock: %w", history.Redact(dbPath), err)
	}
	return unlock, nil
}

// record is the last step: it stores what the night found in one
// transaction (history.Store.Record; res is the bench's result, nil when
// it ran to none). A shared history that fails the write keeps the night
// (keep): it is an infrastructure failure (finish runs again), stored
// whole in history.keep for the next nightly to send. A write that fails
// otherwise makes the night an infrastructure failure, stores nothing of
// tonight, and marks the run's row failed as far as the history takes
// writes at all. The error is the failed write the night could not keep.
func (n *night) record(ctx context.Context, res *bench.Result) error {
	rep := n.rep
	rep.Seconds = n.o.now().Sub(rep.StartedAt).Seconds()
	rerr := n.store.Record(n.id, n.outcome(res))
	if rerr != nil && n.keep(rerr) == nil {
		n.historyFailed(n.kept)
		rep.add(n.finish(ctx))
		rerr = n.store.Record(n.id, n.outcome(res))
	}
	if rerr == nil {
		n.recorded = true
		return nil
	}
	n.historyFailed(rerr)
	rep.add(n.finish(ctx))
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

// keeping is what a night knows of history.keep, the local SQLite
// history it goes into when a shared history (a postgres:// URL) fails it:
// its server could not be reached at the start, or failed it partway
// (marking stale runs, beginning the run, reading the reference window,
// recording the night). A night kept runs every step as it would have
// (drift, build, bench), is judged against what it can still read (the
// shared history's reference window when that was read before the
// failure, else history.keep's), and is stored there whole, to be sent to
// the shared history by the next nightly that reaches it (history.Send);
// it exits 4 with a failed "history" check saying so, after its steps.
type keeping struct {
	keepPath string // history.keep; "" for an SQLite history.path, which nothing replaces
	// kept is why tonight's run is in history.keep rather than in
	// history.path (it names both); nil while it is in history.path.
	kept error
	// shared and sharedID are history.path's store and tonight's row
	// there, when the night was kept after it began there: close ends the
	// row failed, naming where the night went, and the send replaces it
	// with the kept run.
	shared   *history.Store
	sharedID int64
}

// openHistory opens the night's history, history.path, and marks the
// runs killed midway as incomplete (history.Store.MarkStale; Run holds
// the nightly lock). A postgres:// history the nightly cannot open or
// mark (the server is down, unreachable, refuses the login) loses no
// night: it goes into history.keep instead (keep). When the server
// opens, the runs kept there by earlier nights are sent to it first
// (history.Send); what could not be sent stays kept, and the log says
// what happened. The error is a history that will not open at all.
func (n *night) openHistory() error {
	target := n.cfg.Path(n.cfg.History.Path)
	if history.IsURL(target) {
		n.keepPath = n.cfg.Path(n.cfg.History.Keep)
	}
	store, err := history.Open(target)
	if err == nil {
		n.store, n.at = store, target
		if n.keepPath != "" {
			if sent := sendKept(store, n.keepPath); sent != "" {
				n.o.logf("%s", sent)
			}
		}
		err = n.markStale()
	}
	if err != nil {
		if kerr := n.keep(err); kerr != nil {
			n.closeHistory()
			return kerr
		}
	}
	return nil
}

// markStale marks the runs of the night's history killed midway as
// incomplete.
func (n *night) markStale() error {
	stale, err := n.store.MarkStale()
	if err == nil && len(stale) > 0 {
		n.o.logf("marked %d runs killed midway in %s as incomplete: %v", len(stale), history.Redact(n.at), stale)
	}
	return err
}

// beginRun records tonight's run, row, as running
// (history.Store.BeginRun); a shared history that fails it keeps the
// night.
func (n *night) beginRun(row history.Run) error {
	n.row, n.begun = row, true
	id, err := n.store.BeginRun(row)
	if err != nil {
		return n.keep(err)
	}
	n.id = id
	return nil
}

// keep puts the night into history.keep because the shared history
// failed it (err): it opens history.keep (making it and its directory if
// need be), marks its stale runs, begins tonight's run there when it had
// begun, sets kept, and makes the report name the run there. It
// returns err itself (wrapped) when the night
// cannot be kept: history.path is an SQLite file, the night is kept
// already, or history.keep will not take it either.
func (n *night) keep(err error) error {
	if n.keepPath == "" || n.kept != nil {
		return err
	}
	local, lerr := openKeep(n.keepPath)
	if lerr == nil {
		n.shared, n.sharedID = n.store, n.id
		n.store, n.at, n.id = local, n.keepPath, 0
		if lerr = n.markStale(); lerr == nil && n.begun {
			n.id, lerr = local.BeginRun(n.row)
		}
	}
	if lerr != nil {
		return fmt.Errorf("%w; and history.keep will not take tonight's run either: %w", err, lerr)
	}
	n.kept = keptError(err, n.keepPath, n.cfg.Path(n.cfg.History.Path))
	n.o.logf("%v", n.kept)
	if n.rep != nil { // the report names the run where it now is
		n.rep.RunID, n.rep.History = n.id, n.at
	}
	return nil
}

// keptError is why a run is in history.keep rather than in target. The
// URL is printed as history.Redact prints it.
func keptError(err error, keep, target string) error {
	return fmt.Errorf("%w; tonight's run is kept in %s (history.keep) and sent to %s by the next nightly that reaches it", err, keep, history.Redact(target))
}

// closeHistory ends the shared history's row of a night kept after it
// began there (failed, with the night's exit code and a verdict naming
// where the night is; best effort: the server failed the night), and
// closes the stores: every write was committed or reported.
func (n *night) closeHistory() {
	if n.shared != nil {
		if n.sharedID != 0 && n.rep != nil {
			v := fmt.Sprintf("%s; kept in %s as run %d until it is sent here", n.rep.Verdict, n.keepPath, n.id)
			_ = n.shared.FinishRun(n.sharedID, history.Failed, n.rep.ExitCode, v)
		}
		_ = n.shared.Close()
	}
	if n.store != nil {
		_ = n.store.Close()
	}
}

// sendKept sends the runs kept in keep, if any, to store, and says what
// it did ("" when nothing was kept). It holds keep's own lock (the one
// beside an SQLite history, taken on keep's real path) while it sends:
// nightlies that name one history.keep but take different nightly locks
// (two configs, or one server's URL spelt two ways: localhost and
// 127.0.0.1 name two locks) would otherwise both store a kept run before
// either removed it. A keep another process holds stays as it is, for
// the next nightly.
func sendKept(store *history.Store, keep string) string {
	real, err := filepath.EvalSymlinks(keep)
	if err != nil {
		return "" // nothing was ever kept
	}
	unlock, err := history.Lock(real)
	if err != nil {
		return fmt.Sprintf("the runs kept in %v stay there for now: %v", keep, err)
	}
	defer unlock()
	local, err := history.Open(keep)
	if err != nil {
		return fmt.Sprintf("the runs kept in %v stay there: %v", keep, err)
	}
	defer func() { _ = local.Close() }() // its writes were committed or reported
	if _, err := local.MarkStale(); err != nil {
		return fmt.Sprintf("the runs kept in %v stay there: %v", keep, err)
	}
	ids, err := history.Send(local, store)
	msg := fmt.Sprintf("sent %s kept in %s to %s (now %s %v)", textfmt.Plural(len(ids), "run", "runs"), keep, history.Redact(store.Path), textfmt.Word(len(ids), "run", "runs"), ids)
	if err != nil {
		msg += fmt.Sprintf("; the rest stay there: %v", err)
	}
	if len(ids) == 0 && err == nil {
		return ""
	}
	return msg
}

// openKeep opens (creating it and its directory if need be) the local
// history keep.
func openKeep(keep string) (*history.Store, error) {
	if err := os.MkdirAll(filepath.Dir(keep), 0o755); err != nil {
		return nil, fmt.Errorf("history.keep: %w", err)
	}
	return history.Open(keep)
}
