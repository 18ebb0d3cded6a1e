package sglkernel

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/arpatch/arpatch/internal/gitsrc"
	"github.com/arpatch/arpatch/internal/testrepo"
)

// pyproject is testrepo's upstream-shaped sgl-kernel pyproject.toml with
// another distribution name and build backend.
func pyproject(name, backend string) string {
	return strings.NewReplacer(`name = "sglang-kernel"`, `name = "`+name+`"`,
		`"scikit_build_core.build"`, `"`+backend+`"`).Replace(testrepo.KernelPyproject)
}

// tree is a fixture SGLang tree with a kernel project at each dir given.
func tree(dirs ...string) map[string]string {
	files := map[string]string{
		"python/pyproject.toml":    pyproject("sglang", "setuptools.build_meta"),
		"python/sglang/version.py": "__version__ = \"0.0.0\"\n",
	}
	for _, d := range dirs {
		files[d+"/CMakeLists.txt"] = "project(sgl-kernel LANGUAGES CXX CUDA)\n"
		files[d+"/pyproject.toml"] = pyproject("sglang-kernel", "scikit_build_core.build")
		files[d+"/csrc/allreduce/custom_all_reduce.cu"] = "// fixture\n"
		files[d+"/python/sgl_kernel/__init__.py"] = "\n"
	}
	return files
}

type mapFiles map[string]string

func (m mapFiles) ReadFile(name string) ([]byte, error) {
	s, ok := m[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return []byte(s), nil
}

func find(files map[string]string) (Project, error) {
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	return Find("fixture", paths, mapFiles(files))
}

func TestFindBothLayouts(t *testing.T) {
	for _, dir := range []string{"sgl-kernel", "python/sglang/kernels/aot"} {
		p, err := find(tree(dir))
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		want := Project{Dir: dir, Name: "sglang-kernel", Packages: []string{dir + "/python/sgl_kernel"}}
		if !reflect.DeepEqual(p, want) {
			t.Errorf("%s: %+v, want %+v", dir, p, want)
		}
		if p.AllreduceTU() != dir+"/csrc/allreduce/custom_all_reduce.cu" || p.Path("cmake/utils.cmake") != dir+"/cmake/utils.cmake" || p.Prefix() != dir+"/" || p.String() != dir+"/" {
			t.Errorf("%s: paths %q %q %q", dir, p.AllreduceTU(), p.Path("cmake/utils.cmake"), p.Prefix())
		}
	}
	// A project at the tree's root (a standalone sgl-kernel checkout):
	// every path is under it.
	root := map[string]string{}
	for k, v := range tree("k") {
		if r, ok := strings.CutPrefix(k, "k/"); ok {
			root[r] = v
		}
	}
	if p, err := find(root); err != nil || p.Dir != "." || p.Prefix() != "" || p.String() != "./" || p.AllreduceTU() != "csrc/allreduce/custom_all_reduce.cu" || p.Packages[0] != "python/sgl_kernel" {
		t.Errorf("root project: %+v %q %v", p, p.Prefix(), err)
	}
	// The name before 0.4.0, spelled as PEP 503 allows; no wheel.packages
	// means the project's python/.
	f := tree("sgl-kernel")
	f["sgl-kernel/pyproject.toml"] = "[build-system]\nbuild-backend = \"scikit_build_core.build\"\n[project]\nname = \"SGL_Kernel\"\n"
	p, err := find(f)
	if err != nil || p.Name != "sgl-kernel" || !reflect.DeepEqual(p.Packages, []string{"sgl-kernel/python"}) {
		t.Errorf("old name: %+v %v", p, err)
	}
}

func TestFindRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		files map[string]string
		want  []string
	}{
		"none": {tree(), []string{"fixture has no sgl-kernel project: looked for a directory holding csrc/allreduce/custom_all_reduce.cu, CMakeLists.txt and a pyproject.toml built by scikit-build-core with [project] name sglang-kernel or sgl-kernel",
			"python/sglang/kernels/aot/", "Point --src at an SGLang checkout"}},
		"two":          {tree("sgl-kernel", "python/sglang/kernels/aot"), []string{"fixture holds 2 sgl-kernel projects (python/sglang/kernels/aot/, sgl-kernel/); arpatch builds one and will not guess"}},
		"no pyproject": {without(tree("sgl-kernel"), "sgl-kernel/pyproject.toml"), []string{"sgl-kernel/ holds csrc/allreduce/custom_all_reduce.cu but no pyproject.toml"}},
		"no cmake":     {without(tree("sgl-kernel"), "sgl-kernel/CMakeLists.txt"), []string{"sgl-kernel/ holds csrc/allreduce/custom_all_reduce.cu but no CMakeLists.txt"}},
		"other name":   {with(tree("vendor/k"), "vendor/k/pyproject.toml", pyproject("vllm-kernels", "scikit_build_core.build")), []string{`vendor/k/pyproject.toml names project "vllm-kernels"`}},
		"setuptools":   {with(tree("sgl-kernel"), "sgl-kernel/pyproject.toml", pyproject("sglang-kernel", "setuptools.build_meta")), []string{`sgl-kernel/pyproject.toml builds with "setuptools.build_meta", not scikit_build_core.build`}},
		"bad toml":     {with(tree("sgl-kernel"), "sgl-kernel/pyproject.toml", "[project\n"), []string{"sgl-kernel/pyproject.toml: toml:"}},
	} {
		_, err := find(c.files)
		if !IsNotFound(err) {
			t.Errorf("%s: err %v is not a NotFoundError", name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q missing from\n%v", name, w, err)
			}
		}
	}
	// One project and one near miss elsewhere: the project wins.
	f := tree("python/sglang/kernels/aot")
	f["third_party/x/csrc/allreduce/custom_all_reduce.cu"] = "// vendored\n"
	if p, err := find(f); err != nil || p.Dir != "python/sglang/kernels/aot" {
		t.Errorf("with a vendored copy: %+v %v", p, err)
	}
}

func without(m map[string]string, k string) map[string]string { delete(m, k); return m }

func with(m map[string]string, k, v string) map[string]string { m[k] = v; return m }

// TestCheckoutAndCommit locates the project in a git checkout (tracked
// files only), in a plain directory and at a commit of a repository.
func TestCheckoutAndCommit(t *testing.T) {
	dir := t.TempDir()
	if err := testrepo.WriteFiles(dir, tree("python/sglang/kernels/aot")); err != nil {
		t.Fatal(err)
	}
	c, err := testrepo.Init(dir)
	if err != nil {
		t.Fatal(err)
	}
	// An untracked copy (a build directory) does not count.
	if err := testrepo.WriteFiles(filepath.Join(dir, "build", "copy"), tree("k")); err != nil {
		t.Fatal(err)
	}
	p, err := InCheckout(dir)
	if err != nil || p.Dir != "python/sglang/kernels/aot" {
		t.Fatalf("checkout: %+v %v", p, err)
	}
	repo, err := gitsrc.OpenAny(dir)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := repo.TreeAt(c)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := AtCommit(ct); err != nil || p.Dir != "python/sglang/kernels/aot" {
		t.Errorf("at commit: %+v %v", p, err)
	}
	// Without .git the directory is walked: the build copy is a second
	// project now, and hidden directories are skipped.
	if err := os.RemoveAll(filepath.Join(dir, ".git")); err != nil {
		t.Fatal(err)
	}
	if _, err := InCheckout(dir); err == nil || !strings.Contains(err.Error(), "holds 2 sgl-kernel projects (build/copy/k/, python/sglang/kernels/aot/)") {
		t.Errorf("plain dir with two: %v", err)
	}
	if err := os.Rename(filepath.Join(dir, "build"), filepath.Join(dir, ".build")); err != nil {
		t.Fatal(err)
	}
	if p, err := InCheckout(dir); err != nil || p.Dir != "python/sglang/kernels/aot" {
		t.Errorf("plain dir: %+v %v", p, err)
	}
	if _, err := InCheckout(filepath.Join(dir, "nosuch")); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("missing dir: %v", err)
	}
}
