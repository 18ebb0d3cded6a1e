#!/usr/bin/env bash
# gobench.sh runs Go benchmarks in ROUNDS rounds, each a run of the test
# binary over every benchmark the pattern matches (so that the rounds
# interleave and a burst of load falls on all of them alike), and prints,
# per benchmark and unit, the median of its results with their range and
# count, as markdown rows. FLAGS may add -test.count N: N results a round,
# one after another (for benchmarks that build their fixture once per
# binary).
#
#   bench/gobench.sh PACKAGE PATTERN BENCHTIME ROUNDS [FLAGS...]
#   bench/gobench.sh ./history . 5x 5
#   bench/gobench.sh ./internal/gitsrc . 10x 5 -mirror MIRROR
#
# FLAGS go to the test binary (after -test.bench and -test.benchtime).
# The header line names the commit (and whether the tree had uncommitted
# changes), the Go version, the cores and their model, and the load
# average before and after; docs/performance.md records runs.
set -euo pipefail

pkg=${1:?usage: bench/gobench.sh PACKAGE PATTERN BENCHTIME ROUNDS [FLAGS...]}
pattern=${2:?pattern}
benchtime=${3:?benchtime}
rounds=${4:?rounds}
shift 4
repo=$(cd "$(dirname "$0")/.." && pwd)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
work=$(mktemp -d "${TMPDIR:-/tmp}/arpatch-gobench-XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$repo" && go test -c -o "$work/bench.test" "$pkg")
dir=$(cd "$repo" && go list -f '{{.Dir}}' "$pkg")
for ((i = 0; i < rounds; i++)); do
	(cd "$dir" && "$work/bench.test" -test.run '^$' -test.bench "$pattern" -test.benchtime "$benchtime" "$@") >>"$work/out"
done
dirty=$(git -C "$repo" diff --quiet HEAD -- || echo " with uncommitted changes")
echo "arpatch $(git -C "$repo" rev-parse --short HEAD)$dirty, $pkg, $(cd "$repo" && go env GOVERSION), $(nproc) cores ($(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)), load $load0 before and $(cut -d' ' -f1-3 /proc/loadavg) after, $rounds rounds of -benchtime $benchtime${*:+ $*}; each cell: median [min-max] (results)"
echo
echo '| benchmark | unit | median [min-max] (results) |'
echo '|---|---|---|'
# A result line: name, iterations, then value-unit pairs.
awk '/^Benchmark/ && NF >= 4 {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 3; i + 1 <= NF; i += 2) print name, $(i+1), $i
}' "$work/out" | sort -k1,1 -k2,2 -k3,3g | awk '
function flush() {
	if (n == 0) return
	m = (n % 2) ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
	unit = key2; scale = 1
	if (key2 == "ns/op") {
		if (m >= 1e9) { unit = "s/op"; scale = 1e9 } else if (m >= 1e6) { unit = "ms/op"; scale = 1e6 } else if (m >= 1e3) { unit = "µs/op"; scale = 1e3 }
	}
	printf "| `%s` | %s | %s [%s-%s] (%d) |\n", key1, unit, fmt(m / scale), fmt(v[1] / scale), fmt(v[n] / scale), n
	n = 0
}
function fmt(x) { return (x >= 100) ? sprintf("%.0f", x) : sprintf("%.3g", x) }
{ if ($1 != key1 || $2 != key2) { flush(); key1 = $1; key2 = $2 } v[++n] = $3 + 0 }
END { flush() }'
