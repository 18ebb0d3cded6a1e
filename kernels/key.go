package kernels

import (
	"encoding/json"
	"sort"

	"github.com/arpatch/arpatch/internal/digest"
	"github.com/arpatch/arpatch/recipes"
)

// KeySchema versions the layout of Inputs; changing it invalidates every
// cache entry, as it must.
const KeySchema = 4

// PatchInput is one applied patch, by name and sha256.
type PatchInput struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// DepInput is one third-party source as the build will see it.
type DepInput struct {
	Name    string `json:"name"`
	Repo    string `json:"repo"`               // GIT_REPOSITORY or archive URL
	Tag     string `json:"tag"`                // GIT_TAG, when upstream pins one
	URLHash string `json:"url_hash,omitempty"` // URL_HASH of an archive URL
	// Commit is what the --deps-dir copy holds, when one is used: its git
	// HEAD, or "sha256:<hex>" of its files.
	Commit string `json:"commit,omitempty"`
}

// ToolVersions is the part of the toolchain that can change a build's
// output: versions, not install paths.
type ToolVersions struct {
	NVCC      string `json:"nvcc"`
	Python    string `json:"python"`
	Torch     string `json:"torch"`
	TorchCUDA string `json:"torch_cuda"`
	CXX11ABI  bool   `json:"cxx11_abi"`
	CMake     string `json:"cmake"`
	Ninja     string `json:"ninja"`
	Builder   string `json:"builder"` // "uv 0.11.15" or "pip 24.0"
	HostCXX   string `json:"host_cxx"`
}

// Versions extracts the key-relevant part of a toolchain for a builder.
func (tc *Toolchain) Versions(builder string) ToolVersions {
	v := ToolVersions{
		NVCC: tc.NVCC.Version, Python: tc.Python.Version,
		Torch: tc.Torch.Version, TorchCUDA: tc.Torch.CUDA, CXX11ABI: tc.Torch.CXX11ABI,
		CMake: tc.CMake.Version, Ninja: tc.Ninja.Raw, HostCXX: tc.HostCXX.Raw,
	}
	switch recipes.Tool(builder) {
	case recipes.ToolUV:
		v.Builder = "uv " + tc.UV.Version
	case recipes.ToolPip:
		v.Builder = "pip " + tc.Pip.Version
	}
	return v
}

// BuildKind is what a build makes; its word is part of the key (Inputs.Kind).
type BuildKind string

// The build kinds.
const (
	KindWheel        BuildKind = "wheel"         // the sgl-kernel wheel (arpatch build)
	KindAllreduceExt BuildKind = "allreduce-ext" // the allreduce torch extension (arpatch build --allreduce-ext)
)

// Inputs is everything that decides a build's bytes. Its sha256 is the
// cache key: every field must be here, and a field that does not change
// the output (parallelism, paths) must not, or the cache misses for
// nothing.
type Inputs struct {
	Schema int       `json:"schema"`
	Kind   BuildKind `json:"kind"` // KindWheel or KindAllreduceExt
	Commit string    `json:"commit"`
	Series string    `json:"series"`
	// Project is the sgl-kernel project's directory in the tree
	// (sglkernel.Project.Dir): "sgl-kernel" or "python/sglang/kernels/aot".
	Project   string            `json:"project"`
	Patches   []PatchInput      `json:"patches"`
	Archs     []string          `json:"archs"`
	Builder   string            `json:"builder"`
	Offline   bool              `json:"offline"`
	Deps      []DepInput        `json:"deps"`
	BuildEnv  map[string]string `json:"build_env"` // output-relevant environment, e.g. CMAKE_ARGS, CXX
	Toolchain ToolVersions      `json:"toolchain"`
	// Extra holds kind-specific inputs, e.g. the sha256 of the extension's
	// binding source.
	Extra map[string]string `json:"extra,omitempty"`
	// Repro fixes the build environment (SOURCE_DATE_EPOCH, locale,
	// timezone, build root: makeReproducible).
	Repro *Repro `json:"repro,omitempty"`
}

// Key returns the hex sha256 of the inputs' canonical JSON (maps sort
// their keys; slices keep their order, and archs and deps come sorted).
func (in Inputs) Key() string {
	c := in
	c.Archs = append([]string(nil), in.Archs...)
	sort.Strings(c.Archs)
	c.Deps = append([]DepInput(nil), in.Deps...)
	sort.Slice(c.Deps, func(i, j int) bool { return c.Deps[i].Name < c.Deps[j].Name })
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // only plain types: cannot fail
	}
	return digest.SHA256Hex(b)
}
