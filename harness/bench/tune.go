package bench

import (
	"maps"

	"github.com/arpatch/arpatch/harness/tune"
)

// TunedArm is what a tune set in one arm.
type TunedArm struct {
	Name string
	// Env are the assignments set, "K=V", in tune.Thresholds.Env's order.
	Env []string
	// PCIe is true when the arm opens the PCIe gate and so took the pcie
	// series' variables, not only the NCCL variant's.
	PCIe bool
}

// TuneArms sets a tune's variables in arms (tune.Thresholds.ApplyEnv):
// the pcie series' in every arm that opens the PCIe gate, the winning
// NCCL variant's in every arm, the baseline's too, so that custom
// allreduce is compared with the strongest NCCL the tune found. Each arm
// that takes anything gets a copy of its Env; the others are left as they
// were (a nil Env stays nil). It returns the arms that took anything, in
// arm order. `arpatch bench --tune` and nightly's bench.tune both use it.
func TuneArms(arms []Arm, t tune.Thresholds) []TunedArm {
	var out []TunedArm
	for i := range arms {
		env := maps.Clone(arms[i].Env)
		if env == nil {
			env = map[string]string{}
		}
		set, gate := t.ApplyEnv(env)
		if len(set) == 0 {
			continue
		}
		arms[i].Env = env
		out = append(out, TunedArm{Name: arms[i].Name, Env: set, PCIe: gate})
	}
	return out
}
