#!/usr/bin/env bash
# pcie-correctness.sh: the pcie series' correctness matrix on the GPUs of
# this machine, every era (docs/pcie-dispatch.md, "Correct on one H200").
#
#   bench/pcie-correctness.sh MIRROR OUTDIR [WORKDIR]
#
# MIRROR is a local clone of SGLang's history holding the three pinned
# commits (e.g. a clone of github.com/sgl-project/sglang). For each era it
# commits a slim copy of the files a build and the gates need (the
# sgl-kernel project's CMake files, include/ and csrc/allreduce/, and the
# three Python files of the gates) into a scratch repository under WORKDIR
# (default: a new temp dir), applies the pcie recipe to it (the unpatched
# era A tree too, with the baseline recipe), compiles the allreduce
# translation unit for sm_120a and sm_90a (build --check), builds the
# allreduce extension for sm_90a, and runs `arpatch bench allreduce` on it:
# the push and pull kernels and auto through the PCIe branch, every island
# layout, bf16, fp16 and fp32, eager and CUDA graphs, at 4K, 40K, 1M and
# each kernel's cap, at world sizes 8, 6, 4 and 2; then the unpatched tree
# at world size 8; then `arpatch bench p2p`. With fewer GPUs than ranks the
# ranks share GPUs over gloo: sums only, no timings. Each report is
# OUTDIR/<era>-ws<N>.json; arpatch must be on PATH. It needs about 9
# minutes on one H200 with 16 cores; ERAS (default "A B C") and SIZES_WS
# (default "8 6 4 2") narrow it, and P2P=0 leaves out bench p2p. With
# SLIM_DIR set, the slim copies are made beforehand, on a machine holding
# the mirror, with `bench/pcie-correctness.sh --slim MIRROR SLIM_DIR`, and
# copied from SLIM_DIR/upstream-<era> (MIRROR is then not read: pass -).
set -u
if [ "${1:-}" = --slim ]; then slim_only=1; shift; fi
mirror=${1:?usage: bench/pcie-correctness.sh MIRROR OUTDIR [WORKDIR]}
out=${2:?usage: bench/pcie-correctness.sh MIRROR OUTDIR [WORKDIR]}
work=${3:-$(mktemp -d)}
mkdir -p "$out" "$work"
declare -A commit=([A]=84118acf50b3a4c74e85e9ff9033792552de1a76 [B]=8905cbd42f4a27dbecad6487cd3904278756fef8 [C]=0bda0b168ad5bf7311ae639904489a4698a05546)
declare -A kdir=([A]=sgl-kernel [B]=sgl-kernel [C]=python/sglang/kernels/aot)
gates=python/sglang/srt/distributed
[ -n "${slim_only:-}" ] || { nvidia-smi -L; nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", torch.cuda.nccl.version())'; echo "cores $(nproc)"; date -u; } > "$out/env.txt" 2>&1
slim() { # era -> scratch repository commit
  local e=$1 d=${kdir[$1]} r=$work/upstream-$1
  rm -rf "$r"
  if [ -n "${SLIM_DIR:-}" ]; then
    cp -a "$SLIM_DIR/upstream-$e" "$r" && git -C "$r" rev-parse HEAD
    return
  fi
  mkdir -p "$r"
  for p in $d/CMakeLists.txt $d/pyproject.toml $d/cmake $d/include $d/csrc/allreduce \
    $gates/device_communicators/custom_all_reduce.py $gates/device_communicators/custom_all_reduce_utils.py $gates/parallel_state.py; do
    git -C "$mirror" archive "${commit[$e]}" "$p" 2>/dev/null | tar -x -C "$r"
  done
  git -C "$r" init -q && git -C "$r" add -A &&
    git -C "$r" -c user.name=arpatch -c user.email=arpatch@localhost commit -qm "slim copy of ${commit[$e]}" && git -C "$r" rev-parse HEAD
}
if [ -n "${slim_only:-}" ]; then
  for e in ${ERAS:-A B C}; do work=$out slim "$e" || exit 1; done
  exit 0
fi
for e in ${ERAS:-A B C}; do
  c=$(slim "$e") || exit 1
  arpatch apply --recipe pcie --repo "$work/upstream-$e" --src "$work/$e-pcie" --commit "$c" > "$out/apply-$e.txt" 2>&1 || exit 1
  [ "$e" = A ] && { arpatch apply --recipe baseline --repo "$work/upstream-A" --src "$work/A-base" --commit "$c" > "$out/apply-A-base.txt" 2>&1 || exit 1; }
done
trees=$(for e in ${ERAS:-A B C}; do echo "$e-pcie"; done; [ -d "$work/A-base" ] && echo A-base)
for e in ${ERAS:-A B C}; do arpatch build --check --src "$work/$e-pcie" --arch 120a,90a > "$out/check-$e.txt" 2>&1 & done
for t in $trees; do ARPATCH_BUILD_ROOT=$work/broot-$t arpatch build --allreduce-ext --src "$work/$t" --arch 90a --cache-dir "$work/cache-$t" > "$out/ext-$t.txt" 2>&1 & done
wait
ext() { find "$work/cache-$1" -name arpatch_custom_ar.so | head -1; }
for e in ${ERAS:-A B C}; do
  for ws in ${SIZES_WS:-8 6 4 2}; do
    arpatch bench allreduce --world-size "$ws" --ext "$(ext "$e-pcie")" \
      --impl custom-push1,custom-push2,custom-island,custom-auto,custom-1stage,custom-2stage --branches pcie \
      --sizes 4K,40K,1M,cap --dtype bf16,fp16,fp32 --islands all --modes eager,graph \
      --warmup 1 --inner 3 --reps 2 --timeout 240s --json "$out/$e-ws$ws.json" > "$out/$e-ws$ws.txt" 2>&1
  done
done
[ -d "$work/A-base" ] && arpatch bench allreduce --world-size 8 --ext "$(ext A-base)" --impl custom-push1,custom-auto --branches pcie \
  --sizes 4K,1M --modes eager,graph --warmup 1 --inner 3 --reps 2 --timeout 200s --json "$out/A-base-ws8.json" > "$out/A-base-ws8.txt" 2>&1
[ "${P2P:-1}" = 0 ] || arpatch bench p2p --json "$out/p2p.json" > "$out/p2p.txt" 2>&1
echo "reports in $out"
