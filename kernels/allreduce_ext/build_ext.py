"""Build the allreduce extension for `arpatch build --allreduce-ext`.

Compiles csrc/allreduce/custom_all_reduce.cu of the tree's sgl-kernel
project (sgl-kernel/ up to 2026-07-28, python/sglang/kernels/aot/ since;
arpatch finds it and passes its directory as --kernel-dir) with
arpatch's binding.cpp through torch.utils.cpp_extension.load (ninja), for
the archs in TORCH_CUDA_ARCH_LIST, then imports the module to prove it loads
and prints one JSON line: {"so": path, "functions": [...]}.

Usage: python build_ext.py --kernel-dir DIR --binding binding.cpp --build-dir DIR --name NAME
       [--extra-cflag=FLAG ...] [--extra-cuda-cflag=FLAG ...]
"""
import argparse
import json
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel-dir", required=True, help="the sgl-kernel project directory (holds csrc/ and include/)")
    ap.add_argument("--binding", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--name", required=True)
    # Reproducibility flags arpatch adds (prefix maps, -frandom-seed,
    # --objdir-as-tempdir): appended to the host and nvcc flags.
    ap.add_argument("--extra-cflag", action="append", default=[])
    ap.add_argument("--extra-cuda-cflag", action="append", default=[])
    args = ap.parse_args()

    from torch.utils.cpp_extension import CUDA_HOME, load

    kdir = args.kernel_dir
    tu = os.path.join(kdir, "csrc", "allreduce", "custom_all_reduce.cu")
    os.makedirs(args.build_dir, exist_ok=True)
    mod = load(
        name=args.name,
        sources=[args.binding, tu],
        extra_include_paths=[os.path.join(kdir, "include"), os.path.join(kdir, "csrc")],
        extra_cflags=["-O3", "-std=c++17"] + args.extra_cflag,
        extra_cuda_cflags=["-O3", "-std=c++17", "--expt-relaxed-constexpr", "--expt-extended-lambda"] + args.extra_cuda_cflag,
        # custom_all_reduce.cuh calls the driver API (cuPointerGetAttribute):
        # link libcuda, through the toolkit's stub when the driver's is not
        # on the linker path.
        extra_ldflags=["-L" + os.path.join(CUDA_HOME or "/usr/local/cuda", "lib64", "stubs"), "-lcuda"],
        build_directory=args.build_dir,
        verbose=True,
    )
    so = mod.__file__
    funcs = sorted(f for f in dir(mod) if not f.startswith("_"))
    print(json.dumps({"so": so, "functions": funcs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
