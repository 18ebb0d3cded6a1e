package nightly

import (
	"errors"
	"fmt"

	"github.com/arpatch/arpatch/harness/bench"
	"github.com/arpatch/arpatch/harness/tune"
)

// TuneRecord is the tune file a nightly benched with: its thresholds and
// what the patched arm runs at each serving size.
type TuneRecord struct {
	Path       string          `json:"path"`
	Host       string          `json:"host"` // where it was measured
	Thresholds tune.Thresholds `json:"thresholds"`
	// Dispatch is, per serving size at the recipe's TP, the algorithm the
	// pcie series runs with these thresholds ("40K custom-2stage").
	Dispatch []string `json:"dispatch"`
	// Arms are the arms that took the pcie series' variables (those that
	// open the PCIe gate); NCCLArms those that took only the NCCL variant's.
	Arms     []string `json:"arms"`
	NCCLArms []string `json:"nccl_arms,omitempty"`
}

// TuneHost is the environment as harness/tune identifies a host.
func (e Environment) TuneHost() tune.Host {
	return tune.Host{Name: e.Host, GPUModel: e.GPUModel, GPUCount: e.GPUCount, Driver: e.Driver, NCCL: e.NCCL}
}

// applyTune checks bench.tune against this host (bench.force_tune turns
// another host into a warning), sets its variables in the arms
// (bench.TuneArms), and records it in rep. It returns the *tune.HostError of
// a file made elsewhere.
func applyTune(cfg *Config, tf *tune.File, rep *Report, bo *bench.Options) error {
	if tf == nil {
		return nil
	}
	path := cfg.Path(cfg.Bench.Tune)
	warnings, err := tf.Check(path, rep.Environment.TuneHost(), bo.TP, cfg.Bench.ForceTune)
	var ie *tune.IslandsError
	switch {
	case errors.As(err, &ie):
		return fmt.Errorf("bench.tune: %w", err) // force_tune would not help
	case err != nil:
		return fmt.Errorf("bench.tune: %w (in nightly.toml: bench.force_tune = true)", err)
	}
	rep.Warnings = append(rep.Warnings, warnings...)
	rec := &TuneRecord{Path: path, Host: tf.Host.Name, Thresholds: tf.Thresholds,
		Dispatch: tune.Dispatch(tf.Thresholds, bo.TP, tune.BenchSizes(bo.SpecDraftTokens))}
	for _, a := range bench.TuneArms(bo.Arms, tf.Thresholds) {
		if a.PCIe {
			rec.Arms = append(rec.Arms, a.Name)
		} else {
			rec.NCCLArms = append(rec.NCCLArms, a.Name)
		}
	}
	rep.Tune = rec
	return nil
}
