package kernels

import (
	"context"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/arpatch/arpatch/internal/cudaarch"
	"github.com/arpatch/arpatch/internal/digest"
)

//go:embed allreduce_ext/binding.cpp allreduce_ext/build_ext.py
var extFiles embed.FS

// ExtModule is the Python module name of the allreduce extension.
const ExtModule = "arpatch_custom_ar"

// PlanExt decides the build of the allreduce extension: the allreduce
// translation unit of the tree's sgl-kernel project (sglkernel, wherever
// the tree keeps it) plus arpatch's binding.cpp, compiled by
// torch.utils.cpp_extension for the archs, cached like a wheel under its own
// key (kind "allreduce-ext", with the binding's and build script's sha256).
// The tree must carry apply state, as for PlanBuild.
func PlanExt(ctx context.Context, opts BuildOptions) (*Plan, error) {
	p, env, err := startPlan(ctx, &opts, nil)
	if err != nil {
		return nil, err
	}
	st, tc := p.State, p.Toolchain
	kdir := filepath.Join(opts.Src, filepath.FromSlash(p.Project.Dir))
	if _, err := os.Stat(filepath.Join(opts.Src, filepath.FromSlash(p.Project.AllreduceTU()))); err != nil {
		return nil, fmt.Errorf("%s: %v", p.Project.AllreduceTU(), err)
	}
	p.Dir, p.Builder, p.Output = opts.Src, "torch.utils.cpp_extension", "build/"+ExtModule+"*.so"
	p.Problems = tc.Validate(Needs{Archs: opts.Archs, Torch: true, Ninja: true})
	p.Jobs = max(opts.Jobs, 0) // 0: build_ext.py's own default
	var tal []string
	for _, a := range opts.Archs {
		tal = append(tal, a.Torch())
	}
	p.Env = map[string]string{"TORCH_CUDA_ARCH_LIST": strings.Join(tal, ";")}
	if p.Jobs > 0 {
		p.Env["MAX_JOBS"] = strconv.Itoa(p.Jobs)
	}
	if home := tc.CUDAHome(); home != "" {
		p.Env["CUDA_HOME"] = home
	}
	p.Argv = []string{tc.Python.Path, TmpMarker + "/src/build_ext.py", "--kernel-dir", kdir,
		"--binding", TmpMarker + "/src/binding.cpp", "--build-dir", TmpMarker + "/build", "--name", ExtModule}
	extra := map[string]string{}
	for _, f := range []string{"binding.cpp", "build_ext.py"} {
		b, _ := extFiles.ReadFile("allreduce_ext/" + f)
		extra[f+"_sha256"] = digest.SHA256Hex(b)
	}
	// The extension is built by build_ext.py with its own arch flags:
	// TORCH_CUDA_ARCH_LIST does not reach it.
	buildEnv := outputEnv(env, "TORCH_CUDA_ARCH_LIST")
	p.Inputs = Inputs{
		Schema: KeySchema, Kind: KindAllreduceExt, Commit: st.Commit, Series: st.Series, Project: p.Project.Dir,
		Patches: patchInputs(st), Archs: cudaarch.Strings(opts.Archs), Builder: p.Builder,
		BuildEnv: buildEnv, Toolchain: tc.Versions(""), Extra: extra,
	}
	p.Key = p.Inputs.Key()
	if err := makeReproducible(p, env, nil); err != nil {
		return nil, err
	}
	return p, nil
}

// writeExtSources puts the binding and build script into tmp/src, where
// the plan's command expects them.
func writeExtSources(tmp string) error {
	dir := filepath.Join(tmp, "src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"binding.cpp", "build_ext.py"} {
		b, err := extFiles.ReadFile("allreduce_ext/" + f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
