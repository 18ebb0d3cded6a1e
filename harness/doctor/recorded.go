package doctor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RecordedFiles are the files a recorded host holds, by the command whose
// output each is: what `nvidia-smi` printed on it (harness/doctor/testdata/
// HOST holds the recorded hosts, each with a README or a note of where it
// came from) and, when the host has one, `lspci -D -vvv` as root printed it.
var RecordedFiles = map[string]string{
	"nvidia-smi --query-gpu": "query-gpu.csv",
	"nvidia-smi topo -m":     "topo-m.txt",
	"nvidia-smi topo -p2p r": "topo-p2p-r.txt",
	"nvidia-smi topo -p2p w": "topo-p2p-w.txt",
	"lspci -D -vvv":          "lspci-vvv.txt",
}

// RecordedRunner answers nvidia-smi and lspci from the recorded host in
// dir (RecordedFiles) and every other command (python, cuobjdump) with
// next: doctor then judges that host's GPUs with this machine's
// toolchain. An nvidia-smi output dir lacks is an error of that call;
// lspci without lspci-vvv.txt is a program that is not there (no ACS
// finding). A dir without query-gpu.csv is refused before anything runs.
func RecordedRunner(dir string, next Runner) (Runner, error) {
	if _, err := os.Stat(filepath.Join(dir, RecordedFiles["nvidia-smi --query-gpu"])); err != nil {
		return nil, fmt.Errorf("%s is not a recorded host: %w (a recorded host holds query-gpu.csv, topo-m.txt, topo-p2p-r.txt and topo-p2p-w.txt, and lspci-vvv.txt where recorded: harness/doctor/testdata/pcie8 is one)", dir, err)
	}
	return func(ctx context.Context, name string, args ...string) (string, error) {
		cmd := name + " " + strings.Join(args, " ")
		for prefix, file := range RecordedFiles {
			if !strings.HasPrefix(cmd, prefix) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, file))
			switch {
			case os.IsNotExist(err) && name == "lspci":
				return "", fmt.Errorf("%s: not recorded in %s: %w", cmd, dir, exec.ErrNotFound)
			case os.IsNotExist(err):
				return "", fmt.Errorf("not recorded in %s (no %s)", dir, file)
			}
			return string(b), err
		}
		return next(ctx, name, args...)
	}, nil
}
