#!/bin/sh
# Stands in for setpci in tests of the ACS remedy doctor prints: it runs
# pciutils' setpci in demo mode (-D: it parses the command, looks up the
# register and selects the devices, writes nothing) when one comes after
# this script's directory on PATH; without one it checks the form
# `setpci -s BDF ECAP_ACS+0x6.w=0000` itself. It says what it checked.
self=$(cd "$(dirname "$0")" && pwd)
PATH=$(printf '%s\n' "$PATH" | tr ':' '\n' | grep -vx "$self" | paste -sd: -)
if command -v setpci >/dev/null 2>&1; then
  echo "setpci -D $*"
  exec setpci -D "$@"
fi
case "$1 $3" in
"-s ECAP_ACS+0x6.w=0000") ;;
*) echo "setpci (test stand-in): not the form -s BDF ECAP_ACS+0x6.w=0000: $*" >&2; exit 2 ;;
esac
case "$2" in
[0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f]:[0-9a-f][0-9a-f].[0-7]) echo "setpci (test stand-in) would write ACS control 0000 at $2" ;;
*) echo "setpci (test stand-in): bad device $2" >&2; exit 2 ;;
esac
