#!/bin/sh
# Fake ranks for tests: answers "python -m torch.distributed.run ...
# bench.py --out F --sizes ... --impls ... --branches ... --modes ..." by
# writing the records bench.py writes, with a made-up host: NCCL takes
# $FAKE_AR_NCCL_US (20) µs, 1-stage 5 µs up to 16 KiB and 50 above, 2-stage
# 12. custom-auto runs what the pcie series' dispatch picks from
# SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES (unset: 1-stage at world size 2,
# 2-stage above). FAKE_AR_WRONG_ALGO=custom-2stage makes that kernel's sums
# wrong; FAKE_AR_OVERSUB=1 reports more ranks than GPUs (no timings);
# FAKE_AR_OLD_EXT=1 is an extension that takes a bad threshold;
# FAKE_AR_BLOCK=FILE reports the first case, starts the second, writes
# "started" to FILE and blocks (a hang, or a run to interrupt). Anything
# else goes to the fake toolchain's python3.
if [ "$1 $2" != "-m torch.distributed.run" ]; then
  nvcc=$(command -v nvcc)
  exec "${nvcc%/*}/python3" "$@"
fi
ws=2; probe=""; first=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc-per-node) ws=$2; shift ;;
    --out) out=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --impls) impls=$2; shift ;;
    --branches) branches=$2; shift ;;
    --modes) modes=$2; shift ;;
    --probe-thresholds) probe=1 ;;
  esac
  shift
done
echo 'host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read'
over=false; [ -n "$FAKE_AR_OVERSUB" ] && over=true
echo "{\"event\": \"env\", \"world_size\": $ws, \"devices\": 2, \"oversubscribed\": $over, \"device\": \"Fake GPU\", \"nccl\": \"2.28.9\"}" > "$out"
if [ -n "$probe" ]; then
  if [ -n "$FAKE_AR_OLD_EXT" ]; then
    echo '{"event": "threshold_probe", "variable": "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES", "value": "16K", "refused": false}' >> "$out"
  else
    echo '{"event": "threshold_probe", "variable": "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES", "value": "16K", "refused": true, "error": "ValueError: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='"'"'16K'"'"': expected a whole number of bytes"}' >> "$out"
  fi
fi
# The lists are comma-separated: split them by the shell, with no process.
# The records go to $out through one redirection of the whole loop; a
# blocked case leaves it, so that the sleep holds the ranks' stdout as a
# hung rank would.
IFS=,; block=
for impl in $impls; do
  bs=$branches; [ "$impl" = nccl ] && bs=-
  for b in $bs; do
    for s in $sizes; do
      alg=$impl
      if [ "$impl" = custom-auto ]; then
        lim=${SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES-}
        if [ -z "$lim" ]; then
          if [ "$ws" = 2 ]; then alg=custom-1stage; else alg=custom-2stage; fi
        elif [ ${#lim} -lt 12 ] && [ "$s" -le "$lim" ]; then alg=custom-1stage
        elif [ ${#lim} -ge 12 ]; then alg=custom-1stage
        else alg=custom-2stage; fi
      fi
      case $alg in
        nccl) us=${FAKE_AR_NCCL_US:-20} ;;
        custom-1stage) if [ "$s" -le 16384 ]; then us=5; else us=50; fi ;;
        custom-2stage) us=12 ;;
      esac
      for m in $modes; do
        if [ -n "$FAKE_AR_BLOCK" ] && [ -n "$first" ]; then
          block="{\"event\": \"start\", \"impl\": \"$impl\", \"branch\": \"$b\", \"bytes\": $s, \"mode\": \"$m\"}"
          break 4
        fi
        first=1
        if [ "$alg" = "$FAKE_AR_WRONG_ALGO" ]; then
          r='"ok": false, "wrong": {"rank": 0, "index": 0, "got": "nan", "want": "2.0", "mismatches": 8, "of": 8}'
        elif [ "$over" = true ]; then
          r='"ok": true'
        else
          r="\"ok\": true, \"median_us\": $us, \"p10_us\": $us, \"p90_us\": $us"
        fi
        echo "{\"event\": \"result\", \"impl\": \"$impl\", \"branch\": \"$b\", \"bytes\": $s, \"mode\": \"$m\", $r}"
      done
    done
  done
done >> "$out"
if [ -n "$block" ]; then
  echo "$block" >> "$out"
  echo started > "$FAKE_AR_BLOCK"
  exec sleep 300
fi
echo '{"event": "done"}' >> "$out"
