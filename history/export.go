package history

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/arpatch/arpatch/harness/stats"
)

// exportTrials is every trial of a history in the order Export reads them
// (by arm id, index and level), held flat: per trial its integers, wall
// time and a mask of the metrics stored (bit i: stats.Table[i] not NULL),
// and all metrics in one slice, len(stats.Table) a trial. No map or
// string is made per trial.
type exportTrials struct {
	ints  [][4]int64 // idx, concurrency, errors, samples
	wall  []float64
	valid []uint64
	vals  []float64
	byArm map[int64][2]int // arm id: [first, end) in the slices above
}

// readExportTrials reads every trial in one query (Export's first read).
func (s *Store) readExportTrials(what string) (*exportTrials, error) {
	if len(stats.Table) > 64 {
		return nil, fmt.Errorf("%s: %d metrics do not fit the export's mask of 64", what, len(stats.Table))
	}
	x := &exportTrials{byArm: map[int64][2]int{}}
	var armID, last int64 = 0, -1
	var t trialRow
	dest := append([]any{&armID}, t.dest()...) // filled again by each row
	err := s.each(what, `SELECT t.arm_id, `+trialColumns+` FROM trials t ORDER BY t.arm_id, t.idx, t.concurrency`, nil, func(r *sql.Rows) error {
		if err := r.Scan(dest...); err != nil {
			return fmt.Errorf("a trial of arm %d: %w", armID, err)
		}
		n := len(x.wall)
		if armID != last {
			x.byArm[armID] = [2]int{n, n}
			last = armID
		}
		rg := x.byArm[armID]
		rg[1] = n + 1
		x.byArm[armID] = rg
		x.ints = append(x.ints, [4]int64{t.index.Int64, t.level.Int64, t.errors.Int64, t.samples.Int64})
		x.wall = append(x.wall, t.wall.Float64)
		var mask uint64
		for i, v := range t.vals {
			if v.Valid {
				mask |= 1 << i
			}
			x.vals = append(x.vals, v.Float64)
		}
		x.valid = append(x.valid, mask)
		return nil
	})
	return x, err
}

// exportArm is an arm as Export reads it.
type exportArm struct {
	id      int64
	name    string
	invalid bool
}

// eachExportArm reads every run and arm (Export's second and third
// reads) and calls f for each arm of each run, oldest run first, each
// run's arms in the order they were stored.
func (s *Store) eachExportArm(what string, f func(e ExportRun, armID int64) error) error {
	arms := map[int64][]exportArm{} // by run
	err := s.each(what, `SELECT id, run_id, name, invalid FROM arms ORDER BY run_id, id`, nil, func(r *sql.Rows) error {
		var a exportArm
		var run int64
		err := r.Scan(&a.id, &run, &a.name, &a.invalid)
		arms[run] = append(arms[run], a)
		return err
	})
	if err != nil {
		return err
	}
	killed, err := s.killedRuns(what)
	if err != nil {
		return err
	}
	return s.each(what, `SELECT id, started_at, status, hardware_key, workload, sglang_commit FROM runs ORDER BY id`, nil, func(r *sql.Rows) error {
		var e ExportRun
		var started string
		if err := r.Scan(&e.RunID, &started, &e.Status, &e.HardwareKey, &e.Workload, &e.Commit); err != nil {
			return fmt.Errorf("run %d: %w", e.RunID, err)
		}
		var err error
		if e.StartedAt, err = parseTime(e.RunID, "started_at", started); err != nil {
			return err
		}
		if killed[e.RunID] {
			e.Status = Killed
		}
		for _, a := range arms[e.RunID] {
			e.Arm, e.Invalid = a.name, a.invalid
			if err := f(e, a.id); err != nil {
				return err
			}
		}
		return nil
	})
}

// ExportCSV writes every trial of every run to w as WriteCSV writes
// Export's rows, byte for byte, without holding the rows: each arm's
// run and arm fields are encoded once, each trial's numbers appended
// straight into one buffered writer. Errors: reading the history, or
// writing w.
func (s *Store) ExportCSV(w io.Writer) error {
	const what = "exporting the trials"
	x, err := s.readExportTrials(what)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var prefix bytes.Buffer
	cw := csv.NewWriter(&prefix)
	if err := cw.Write(csvHeader()); err != nil {
		return err
	}
	cw.Flush()
	if _, err := bw.Write(prefix.Bytes()); err != nil {
		return err
	}
	line := make([]byte, 0, 512)
	rec := make([]string, 8)
	err = s.eachExportArm(what, func(e ExportRun, armID int64) error {
		rg, ok := x.byArm[armID]
		if !ok {
			return nil
		}
		prefix.Reset()
		rec = append(rec[:0], strconv.FormatInt(e.RunID, 10), e.StartedAt.Format(time.RFC3339), string(e.Status), e.HardwareKey, e.Workload, e.Commit, e.Arm, strconv.FormatBool(e.Invalid), "")
		if err := cw.Write(rec); err != nil {
			return err
		}
		cw.Flush()
		p := prefix.Bytes()
		p = p[:len(p)-1] // the record's newline; the empty last field leaves its comma
		for i := rg[0]; i < rg[1]; i++ {
			n := x.ints[i]
			line = append(line[:0], p...)
			line = strconv.AppendInt(line, n[0], 10)
			line = append(line, ',')
			line = strconv.AppendInt(line, n[1], 10)
			line = append(line, ',')
			line = strconv.AppendFloat(line, x.wall[i], 'g', -1, 64)
			vals := x.vals[i*len(stats.Table) : (i+1)*len(stats.Table)]
			for j, v := range vals {
				line = append(line, ',')
				if x.valid[i]&(1<<j) != 0 {
					line = strconv.AppendFloat(line, v, 'g', -1, 64)
				}
			}
			line = append(line, ',')
			line = strconv.AppendInt(line, n[2], 10)
			line = append(line, ',')
			line = strconv.AppendInt(line, n[3], 10)
			line = append(line, '\n')
			if _, err := bw.Write(line); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// ExportJSON writes every trial of every run to w as WriteJSON writes
// Export's rows, byte for byte (an indented array), without holding the
// rows, as ExportCSV does. Errors: reading the history, a metric that is
// not finite (JSON has no NaN or Inf), or writing w.
func (s *Store) ExportJSON(w io.Writer) error {
	const what = "exporting the trials"
	x, err := s.readExportTrials(what)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	keys := make([][]byte, len(stats.Table))
	for j, m := range stats.Table {
		keys[j] = []byte(",\n    " + strconv.Quote(m.Name) + ": ")
	}
	line := make([]byte, 0, 1024)
	first := true
	err = s.eachExportArm(what, func(e ExportRun, armID int64) error {
		rg, ok := x.byArm[armID]
		if !ok {
			return nil
		}
		p, err := json.MarshalIndent(e, "  ", "  ")
		if err != nil {
			return err
		}
		p = p[:len(p)-len("\n  }")]
		for i := rg[0]; i < rg[1]; i++ {
			n := x.ints[i]
			line = line[:0]
			if first {
				line = append(line, "[\n  "...)
				first = false
			} else {
				line = append(line, ",\n  "...)
			}
			line = append(line, p...)
			line = append(line, ",\n    \"trial\": "...)
			line = strconv.AppendInt(line, n[0], 10)
			line = append(line, ",\n    \"concurrency\": "...)
			line = strconv.AppendInt(line, n[1], 10)
			line = append(line, ",\n    \"wall_s\": "...)
			if line, err = appendJSONFloat(line, x.wall[i]); err != nil {
				return fmt.Errorf("run %d arm %s trial %d wall_s: %w", e.RunID, e.Arm, n[0], err)
			}
			line = append(line, ",\n    \"errors\": "...)
			line = strconv.AppendInt(line, n[2], 10)
			line = append(line, ",\n    \"samples\": "...)
			line = strconv.AppendInt(line, n[3], 10)
			vals := x.vals[i*len(stats.Table) : (i+1)*len(stats.Table)]
			for j, v := range vals {
				line = append(line, keys[j]...)
				if x.valid[i]&(1<<j) == 0 {
					line = append(line, "null"...)
					continue
				}
				if line, err = appendJSONFloat(line, v); err != nil {
					return fmt.Errorf("run %d arm %s trial %d %s: %w", e.RunID, e.Arm, n[0], stats.Table[j].Name, err)
				}
			}
			line = append(line, "\n  }"...)
			if _, err := bw.Write(line); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	end := "\n]\n"
	if first {
		end = "[]\n"
	}
	if _, err := bw.WriteString(end); err != nil {
		return err
	}
	return bw.Flush()
}

// appendJSONFloat appends f as encoding/json writes a float64: the
// shortest form, in exponent form below 1e-6 and from 1e21 on, its
// exponent without a leading zero (1e-07 is 1e-7).
// Upstream: go/src/encoding/json/encode.go@go1.26 (floatEncoder.encode)
func appendJSONFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, fmt.Errorf("unsupported value: %s", strconv.FormatFloat(f, 'g', -1, 64))
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// killedRuns is the set of runs still "running" whose nightly's process
// is gone (Gone), which an export reports as Killed, as history list
// does. It reads the running runs by status (an index).
func (s *Store) killedRuns(what string) (map[int64]bool, error) {
	var running []Run
	err := s.each(what, `SELECT id, pid FROM runs WHERE status = ?`, []any{Running}, func(r *sql.Rows) error {
		x := Run{Status: Running}
		err := r.Scan(&x.ID, &x.PID)
		running = append(running, x)
		return err
	})
	if err != nil {
		return nil, err
	}
	gone, err := s.Gone(running)
	if err != nil {
		return nil, err
	}
	killed := make(map[int64]bool, len(gone))
	for id := range gone {
		killed[id] = true
	}
	return killed, nil
}
