#!/bin/sh
# Stands in for python3 in tests. Asked for `-m torch.distributed.run
# --standalone --nproc-per-node N p2p.py ARGS`, it runs the real p2p.py
# with ARGS on its stub device (--stub-world-size N: N ranks as threads of
# one process, no torch, no GPU), adding the words of $P2P_STUB (stub
# faults: --stub-corrupt write:1:2, --stub-rate read:0:3:12, ...) and
# --stub-bus-ids $P2P_STUB_BUS_IDS, with the first python3 after this
# script's directory on PATH that runs Python (a fake python3 for doctor's
# probes may come before it). Anything else goes to the python3 that
# comes after this script's directory on PATH, except torchrun.Check's
# script (its first line names it), which the stub answers as an
# interpreter with torch does (the stub device needs none), or with
# P2P_STUB_NO_TORCH=1 as one without.
case "$1 $2" in
"-c # arpatch: can this interpreter start torchrun's ranks?"*)
  if [ -n "${P2P_STUB_NO_TORCH-}" ]; then
    echo "ModuleNotFoundError: No module named 'torch'"
    exit 1
  fi
  echo "2.11.0+cu130"
  exit 0 ;;
esac
self=$(cd "$(dirname "$0")" && pwd)
PATH=$(printf '%s\n' "$PATH" | tr ':' '\n' | grep -vx "$self" | paste -sd: -)
export PATH
if [ "$1 $2" != "-m torch.distributed.run" ]; then
  exec python3 "$@"
fi
shift 2
ws=1
while [ $# -gt 0 ]; do
  case "$1" in
    --standalone) ;;
    --nproc-per-node) ws=$2; shift ;;
    *) break ;;
  esac
  shift
done
py=
IFS=:
for d in $PATH; do
  if [ -x "$d/python3" ] && "$d/python3" -c 'import sys' >/dev/null 2>&1; then py=$d/python3; break; fi
done
unset IFS
[ -n "$py" ] || { echo "stubranks.sh: no python3 that runs Python on PATH" >&2; exit 2; }
# $P2P_STUB is split into words on purpose.
# shellcheck disable=SC2086
exec "$py" "$@" --stub-world-size "$ws" --stub-bus-ids "${P2P_STUB_BUS_IDS-}" $P2P_STUB
