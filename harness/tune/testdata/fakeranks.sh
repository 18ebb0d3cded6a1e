#!/bin/sh
# Fake ranks for tests: answers "python -m torch.distributed.run ...
# bench.py --out F --sizes ... --impls ... --branches ... --modes ..." by
# writing the records bench.py writes (handwritten in its format, not
# recorded on a GPU), with a made-up host:
#   NCCL $FAKE_AR_NCCL_US (20) µs; under NCCL_PROTO=LL $FAKE_AR_LL_US (15),
#   under NCCL_PROTO=Simple $FAKE_AR_SIMPLE_US (20), any other variant 20;
#   custom-1stage 5 µs up to 16 KiB and 50 above, custom-2stage 12,
#   custom-push1 3 up to 32 KiB and 30 above, custom-push2 9,
#   custom-island 7, each n/a where its scratch (as the pcie series counts
#   it: push1 N x S, push2 N x ceil(S/N) + S, island (M+K) x ceil(S/M) +
#   S, in 16-byte packs) passes the 8 MiB after the Signal block.
# custom-auto runs what the pcie series' dispatch picks: the schedule in
# SGLANG_PCIE_CUSTOM_AR_ALGO (its first step's algorithm up to its bound,
# the last one above; a single name everywhere), else the legacy
# SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES (unset: 1-stage at world size 2,
# 2-stage above). --islands LAYOUT is echoed; custom-island and custom-auto
# run once per layout. --custom-max-bytes N reports custom cases above N
# n/a. The push kernels on the nvlink branch are n/a. --dtypes loops over
# the dtypes (default bf16); the size "cap" is 8 MiB, for custom-push1
# 8 MiB / world size, for custom-push2 and custom-island 4 MiB - 1 KiB (made
# up: the fake has no scratch formula), marked "cap".
# FAKE_AR_WRONG_ALGO=custom-2stage makes that kernel's sums wrong (any
# impl name; nccl:LL for a variant); FAKE_AR_OVERSUB=1 reports more ranks
# than GPUs (no timings); FAKE_AR_OLD_EXT=1 is an extension that takes a
# bad threshold and a bad schedule; FAKE_AR_NO_PUSH=1 one that takes a bad
# schedule only (it predates the push kernels); FAKE_AR_BLOCK=FILE reports
# the first case, starts the second, writes "started" to FILE and blocks (a
# hang, or a run to interrupt). It answers torchrun.Check's script (its
# first line names it) as an interpreter with torch does, or with
# FAKE_AR_NO_TORCH=1 as one without. Anything else goes to the fake
# toolchain's python3.
case "$1 $2" in
"-c # arpatch: can this interpreter start torchrun's ranks?"*)
  if [ -n "${FAKE_AR_NO_TORCH-}" ]; then
    echo "ModuleNotFoundError: No module named 'torch'"
    exit 1
  fi
  echo "2.11.0+cu130"
  exit 0 ;;
esac
if [ "$1 $2" != "-m torch.distributed.run" ]; then
  nvcc=$(command -v nvcc)
  exec "${nvcc%/*}/python3" "$@"
fi
ws=2; probe=""; first=""; layouts=""; gate=-1; dtypes=bf16
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc-per-node) ws=$2; shift ;;
    --out) out=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --impls) impls=$2; shift ;;
    --branches) branches=$2; shift ;;
    --modes) modes=$2; shift ;;
    --islands) layouts="$layouts${layouts:+;}$2"; shift ;;
    --custom-max-bytes) gate=$2; shift ;;
    --dtypes) dtypes=$2; shift ;;
    --probe-thresholds) probe=1 ;;
  esac
  shift
done
variant=""
case "${NCCL_PROTO-}${NCCL_ALGO-}${NCCL_MAX_NCHANNELS-}${NCCL_MIN_NCHANNELS-}${NCCL_BUFFSIZE-}${NCCL_P2P_LEVEL-}" in
  "") ;;
  *) variant=set ;;
esac
for k in NCCL_PROTO NCCL_ALGO NCCL_MAX_NCHANNELS NCCL_MIN_NCHANNELS NCCL_BUFFSIZE NCCL_P2P_LEVEL; do
  eval "v=\${$k-}"
  [ -n "$v" ] && echo "host:1:1 [0] NCCL INFO $k set by environment to $v"
done
if [ -n "$FAKE_AR_NCCL_LOG" ]; then
  # NCCL's lines from a log; NCCL_P2P_LEVEL as NCCL takes it: logged, and
  # at SYS the SHM connections go P2P (the host's P2P works).
  [ -n "$NCCL_P2P_LEVEL" ] && echo "host:1:1 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to $NCCL_P2P_LEVEL"
  while IFS= read -r l; do
    if [ "$NCCL_P2P_LEVEL" = SYS ]; then l=$(printf '%s\n' "$l" | sed 's#via SHM/direct/direct#via P2P/CUMEM#'); fi
    printf '%s\n' "$l"
  done < "$FAKE_AR_NCCL_LOG"
else
  echo 'host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read'
fi
over=false; [ -n "$FAKE_AR_OVERSUB" ] && over=true
lj=""; IFS=';'; for l in $layouts; do lj="$lj${lj:+, }\"$l\""; done; unset IFS
echo "{\"event\": \"env\", \"world_size\": $ws, \"devices\": 2, \"oversubscribed\": $over, \"device\": \"Fake GPU\", \"nccl\": \"2.28.9\", \"islands\": [$lj]}" > "$out"
if [ -n "$probe" ]; then
  if [ -n "$FAKE_AR_OLD_EXT" ]; then
    echo '{"event": "threshold_probe", "variable": "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES", "value": "16K", "refused": false}' >> "$out"
  else
    echo '{"event": "threshold_probe", "variable": "SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES", "value": "16K", "refused": true, "error": "ValueError: SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES='"'"'16K'"'"': expected a whole number of bytes"}' >> "$out"
  fi
fi
push=true
case ",$impls," in
  *,custom-push1,*|*,custom-push2,*|*,custom-island,*)
    if [ -n "$FAKE_AR_OLD_EXT$FAKE_AR_NO_PUSH" ]; then
      push=false
      echo '{"event": "algo_probe", "variable": "SGLANG_PCIE_CUSTOM_AR_ALGO", "value": "bogus", "refused": false}' >> "$out"
    else
      echo '{"event": "algo_probe", "variable": "SGLANG_PCIE_CUSTOM_AR_ALGO", "value": "bogus", "refused": true, "error": "ValueError: SGLANG_PCIE_CUSTOM_AR_ALGO='"'"'bogus'"'"': step 1 names bogus"}' >> "$out"
    fi ;;
esac
# What the schedule runs at size $1: sets alg (IFS is ',' here).
sched() {
  lim=${SGLANG_PCIE_CUSTOM_AR_1STAGE_MAX_BYTES-}
  if [ -n "${SGLANG_PCIE_CUSTOM_AR_ALGO-}" ]; then
    rest=$SGLANG_PCIE_CUSTOM_AR_ALGO
    while :; do
      step=${rest%%,*}
      a=${step%%:*}
      if [ "$step" = "$rest" ] || [ "$1" -le "${step#*:}" ]; then break; fi
      rest=${rest#*,}
    done
    case $a in
      pull1) alg=custom-1stage ;; pull2) alg=custom-2stage ;; *) alg=custom-$a ;;
    esac
  elif [ -z "$lim" ]; then
    if [ "$ws" = 2 ]; then alg=custom-1stage; else alg=custom-2stage; fi
  elif [ ${#lim} -lt 12 ] && [ "$1" -le "$lim" ]; then alg=custom-1stage
  elif [ ${#lim} -ge 12 ]; then alg=custom-1stage
  else alg=custom-2stage; fi
}
# The lists are split by the shell (IFS), with no process: ',' between
# impls, branches, sizes and modes, ';' between layouts. The records go to
# $out through one redirection of the whole loop; a blocked case leaves
# it, so that the sleep holds the ranks' stdout as a hung rank would.
block=
IFS=,
for impl in $impls; do
  bs=$branches; [ "$impl" = nccl ] && bs=-
  for b in $bs; do
    ls=-
    case $impl in custom-island|custom-auto) [ "$b" = pcie ] && [ -n "$layouts" ] && ls=$layouts ;; esac
    IFS=';'
    for l in $ls; do
      IFS=,
      isl=""; [ "$l" != - ] && isl=", \"islands\": \"$l\""
      # im: ranks per island (the first island's, or every rank).
      im=$ws
      if [ "$l" != - ]; then
        r=${l%%/*}; im=1
        while [ "$r" != "${r#*,}" ]; do r=${r#*,}; im=$((im + 1)); done
      fi
      case $impl in
        custom-push1|custom-push2|custom-island)
          if [ "$b" = nvlink ]; then
            echo "{\"event\": \"result\", \"impl\": \"$impl\", \"branch\": \"$b\", \"ok\": false, \"not_applicable\": true, \"error\": \"the push algorithms exist on the PCIe branch only\"}"
            continue
          fi
          if [ "$push" = false ]; then
            echo "{\"event\": \"result\", \"impl\": \"$impl\", \"branch\": \"$b\"$isl, \"ok\": false, \"unsupported\": true, \"error\": \"init_custom_ar took SGLANG_PCIE_CUSTOM_AR_ALGO=bogus\"}"
            continue
          fi ;;
      esac
      for s in $sizes; do
        cap=""
        if [ "$s" = cap ]; then
          cap=', "cap": true'
          case $impl in
            custom-push1) s=$((8388608 / ws / 16 * 16)) ;;
            custom-push2|custom-island) s=4193280 ;;
            *) s=8388608 ;;
          esac
        fi
        alg=$impl
        [ "$impl" = custom-auto ] && sched "$s"
        name=$impl
        [ "$impl" = nccl ] && [ -n "$variant" ] && name=nccl:${NCCL_PROTO:-${NCCL_ALGO:-other}}
        na=""
        if [ "$impl" != nccl ] && [ "$gate" -ge 0 ] && [ "$s" -gt "$gate" ]; then na="above the custom allreduce cut"
        elif [ "$alg" = custom-push1 ] && [ $((ws * s)) -gt 8388608 ]; then na="custom-push1 needs $((ws * s)) bytes of scratch"
        elif [ "$alg" = custom-push2 ] && [ $(((ws * ((s / 16 + ws - 1) / ws) + s / 16) * 16)) -gt 8388608 ]; then na="custom-push2 does not fit the scratch"
        elif [ "$alg" = custom-island ] && [ $(((im + ws / im) * ((s / 16 + im - 1) / im) * 16 + s / 16 * 16)) -gt 8388608 ]; then na="custom-island does not fit the scratch"
        fi
        case $alg in
          nccl)
            us=${FAKE_AR_NCCL_US:-20}
            case "${NCCL_PROTO-}" in LL) us=${FAKE_AR_LL_US:-15} ;; Simple) us=${FAKE_AR_SIMPLE_US:-20} ;; esac
            proto=${NCCL_PROTO:-LL}
            echo "host:1:1 [0] NCCL INFO AllReduce: $s Bytes -> Algo RING proto $proto channel{Lo..Hi}={0..1}" >&2 ;;
          custom-1stage) if [ "$s" -le 16384 ]; then us=5; else us=50; fi ;;
          custom-2stage) us=12 ;;
          custom-push1) if [ "$s" -le 32768 ]; then us=3; else us=30; fi ;;
          custom-push2) us=9 ;;
          custom-island) us=7 ;;
        esac
        for d in $dtypes; do
        for m in $modes; do
          key="\"impl\": \"$impl\", \"branch\": \"$b\"$isl, \"bytes\": $s$cap, \"mode\": \"$m\", \"dtype\": \"$d\""
          if [ -n "$na" ]; then
            echo "{\"event\": \"result\", $key, \"ok\": false, \"not_applicable\": true, \"error\": \"$na\"}"
            continue
          fi
          if [ -n "$FAKE_AR_BLOCK" ] && [ -n "$first" ]; then
            block="{\"event\": \"start\", $key}"
            break 6
          fi
          first=1
          if [ "$alg" = "$FAKE_AR_WRONG_ALGO" ] || [ "$name" = "$FAKE_AR_WRONG_ALGO" ]; then
            r='"ok": false, "wrong": {"rank": 0, "index": 0, "got": "nan", "want": "2.0", "mismatches": 8, "of": 8}'
          elif [ "$over" = true ]; then
            r='"ok": true'
          else
            r="\"ok\": true, \"median_us\": $us, \"p10_us\": $us, \"p90_us\": $us"
          fi
          echo "{\"event\": \"result\", $key, $r}"
        done
        done
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
