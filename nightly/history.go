package nightly

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/arpatch/arpatch/history"
)

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
