#!/usr/bin/env bash
# compare.sh measures arpatch's main job against git on a real SGLang
# mirror, as paired ratios (arpatch ÷ the alternative): each round runs
# both sides back to back, in alternating order (an interleaved pair), and
# the table gives, for each side, the median over the rounds with its
# range (min-max), and the median of the pairs' ratios with their range.
# Wall time from the clock, CPU (user+sys, 10 ms resolution) and peak RSS
# from GNU time. The short jobs (apply on a checkout, status) run three
# times as many rounds. The header line names the commit (and whether the
# tree had uncommitted changes), the Go and git versions, the cores and
# their model, the Python interpreter the gate judge asks
# ($ARPATCH_PYTHON, else python3 on PATH; a script such as pyenv's shim is
# run at every apply, an interpreter's identity is kept by its stat), and
# the load average before and after.
#
#   bench/compare.sh MIRROR [ROUNDS]      (default 7 rounds)
#
# MIRROR is a local clone (bare or not) holding the recipe's pinned commit
# 84118acf50b3 and the 200 first-parent commits before it. Needs git,
# GNU time (/usr/bin/time) and Go; quilt is used when installed. Scratch
# work goes to a temporary directory that is removed at the end. The
# table goes to stdout in markdown; docs/performance.md records a run.
set -euo pipefail

mirror=${1:?usage: bench/compare.sh MIRROR [ROUNDS]}
rounds=${2:-7}
commit=84118acf50b3a4c74e85e9ff9033792552de1a76
series=pcie-2026-04
mirror=$(cd "$mirror" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "compare.sh: GNU time is needed at $TIME (apt-get install time)" >&2; exit 2; }
git -C "$mirror" cat-file -e "$commit^{commit}" 2>/dev/null || { echo "compare.sh: $mirror does not have commit $commit; pass a mirror of SGLang that does" >&2; exit 2; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
work=$(mktemp -d "${TMPDIR:-/tmp}/arpatch-compare-XXXXXX")
trap 'rm -rf "$work"' EXIT
arpatch=$work/arpatch
(cd "$repo" && go build -o "$arpatch" ./cmd/arpatch)
patches=("$repo"/patches/sglang/$series/*.patch)

# run LABEL CMD...: time one command; appends "wall cpu rss" to
# $work/LABEL (wall from the clock in ns, cpu and peak RSS from GNU time).
run() {
	local label=$1 t0 t1
	shift
	t0=$(date +%s%N)
	"$TIME" -o "$work/t" -f "%U %S %M" "$@" >/dev/null 2>"$work/err" || { echo "compare.sh: $label failed: $*" >&2; cat "$work/err" >&2; exit 1; }
	t1=$(date +%s%N)
	awk -v ns=$((t1 - t0)) '{printf "%.4f %.2f %d\n", ns/1e9, $1+$2, $3}' "$work/t" >>"$work/$label"
}

# stat FIELD [DIV]: "median [min-max]" of field FIELD of the numbers on
# stdin, each divided by DIV (default 1), to 3 significant digits.
stat() {
	cut -d' ' -f"$1" | sort -g | awk -v d="${2:-1}" '{a[NR]=$1/d} END{m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.3g [%.3g-%.3g]", m, a[1], a[NR]}'
}

# median LABEL FIELD: "median [min-max]" of one field (1 wall s, 2 cpu s,
# 3 peak RSS, shown in MiB) over LABEL's rounds.
median() {
	if [ "$2" = 3 ]; then stat 3 1024 <"$work/$1"; else stat "$2" <"$work/$1"; fi
}

# pair A B [N]: run the two jobs of one row N times (default ROUNDS),
# alternating which goes first.
pair() {
	local a=$1 b=$2 n=${3:-$rounds} i
	for ((i = 0; i < n; i++)); do
		if ((i % 2)); then "$b"; "$a"; else "$a"; "$b"; fi
	done
}

# 1-2. The main job from the local mirror: clone, check out the pin, apply.
main_arpatch() { rm -rf "$work/a"; run main_arpatch "$arpatch" apply --recipe pcie --repo "$mirror" --src "$work/a"; }
main_arpatch1() { rm -rf "$work/a"; run main_arpatch1 "$arpatch" apply --recipe pcie --repo "$mirror" --src "$work/a"; }
main_git() {
	rm -rf "$work/g"
	run main_git sh -c 'git clone -q --local "$1" "$2" && git -C "$2" checkout -q --detach "$3" && shift 3 && cd "$0" && git apply "$@"' "$work/g" "$mirror" "$work/g" "$commit" "${patches[@]}"
}
main_git1() {
	rm -rf "$work/g1"
	run main_git1 sh -c 'git clone -q -n --local "$1" "$2" && git -C "$2" checkout -q --detach "$3" && shift 3 && cd "$0" && git apply "$@"' "$work/g1" "$mirror" "$work/g1" "$commit" "${patches[@]}"
}
pair main_arpatch main_git
pair main_arpatch1 main_git1

# 3. apply on an existing clean checkout (the revert between is not timed).
"$arpatch" revert --src "$work/a" >/dev/null
git -C "$work/g" apply -R "${patches[@]}"
apply_arpatch() { run apply_arpatch "$arpatch" apply --recipe pcie --src "$work/a"; "$arpatch" revert --src "$work/a" >/dev/null; }
apply_git() { run apply_git sh -c 'cd "$0" && git apply "$@"' "$work/g" "${patches[@]}"; git -C "$work/g" apply -R "${patches[@]}"; }
pair apply_arpatch apply_git $((3 * rounds))
have_quilt=
if command -v quilt >/dev/null; then
	have_quilt=1
	mkdir -p "$work/g/patches"
	for p in "${patches[@]}"; do cp "$p" "$work/g/patches/"; basename "$p" >>"$work/g/patches/series"; done
	apply_quilt() { run apply_quilt sh -c 'cd "$0" && quilt push -aq' "$work/g"; (cd "$work/g" && quilt pop -aq >/dev/null); }
	for ((i = 0; i < 3 * rounds; i++)); do apply_quilt; done
	rm -rf "$work/g/patches" "$work/g/.pc"
fi

# 4. status of the patched checkout.
"$arpatch" apply --recipe pcie --src "$work/a" >/dev/null
status_arpatch() { run status_arpatch "$arpatch" status --src "$work/a"; }
status_git() { run status_git git -C "$work/a" status --porcelain; }
pair status_arpatch status_git $((3 * rounds))

# 5. patches check over the 200 first-parent commits up to the pin.
mapfile -t commits < <(git -C "$mirror" rev-list --first-parent -n 200 "$commit")
args=()
for c in "${commits[@]}"; do args+=(--commit "$c"); done
check_arpatch() { run check_arpatch sh -c '"$@" || [ $? = 1 ]' sh "$arpatch" patches check --repo "$mirror" --series "$series" "${args[@]}"; }
git clone -q -n --local "$mirror" "$work/c"
{
	printf 'cd %q\n' "$work/c"
	printf 'for c in "$@"; do git checkout -q --detach "$c" && git apply --check'
	printf ' %q' "${patches[@]}"
	printf ' 2>/dev/null; done\ntrue\n'
} >"$work/check-git.sh"
check_git() { run check_git sh "$work/check-git.sh" "${commits[@]}"; }
pair check_arpatch check_git

# ratio A B FIELD: the ratios of the pairs (A's round i over B's round
# i), "median [min-max]"; n/a when B's field is 0 in some pair (CPU below
# GNU time's 10 ms).
ratio() {
	paste -d' ' "$work/$1" "$work/$2" | awk -v f="$3" '{b = $(f+3); if (b <= 0) {print "n/a"; exit 1}; print $f/b}' >"$work/ratio" || { echo n/a; return; }
	stat 1 <"$work/ratio"
}
row() { # TASK ALT LABEL_A LABEL_B
	printf '| %s | %s s, cpu %s s, %s MiB | %s: %s s, cpu %s s, %s MiB | %s× (cpu %s×) |\n' "$1" \
		"$(median "$3" 1)" "$(median "$3" 2)" "$(median "$3" 3)" \
		"$2" "$(median "$4" 1)" "$(median "$4" 2)" "$(median "$4" 3)" \
		"$(ratio "$3" "$4" 1)" "$(ratio "$3" "$4" 2)"
}
dirty=$(git -C "$repo" diff --quiet HEAD -- || echo " with uncommitted changes")
py=$(command -v "${ARPATCH_PYTHON:-python3}" || echo none)
case "$(head -c2 "$py" 2>/dev/null)" in '#!') py="$py (a script: asked at every apply)" ;; esac
echo "arpatch $(git -C "$repo" rev-parse --short HEAD)$dirty, $(cd "$repo" && go env GOVERSION), $(git --version), $(nproc) cores ($(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)), python3 $py, load $load0 before and $(cut -d' ' -f1-3 /proc/loadavg) after, $rounds rounds (3× for the short jobs); each cell: median [min-max] over the rounds, ratios over the interleaved pairs"
echo
echo '| task | arpatch | alternative | ratio (wall, cpu) |'
echo '|---|---|---|---|'
row '`apply --recipe pcie` from a local mirror (clone, checkout, apply)' '`git clone --local` + `checkout --detach` + `git apply`' main_arpatch main_git
row 'same, against git with a single checkout' '`git clone -n --local` + `checkout --detach` + `git apply`' main_arpatch1 main_git1
row '`apply` on an existing clean checkout' '`git apply`' apply_arpatch apply_git
if [ -n "$have_quilt" ]; then row '`apply` on an existing clean checkout' '`quilt push -a`' apply_arpatch apply_quilt; fi
row '`status`' '`git status --porcelain`' status_arpatch status_git
row '`patches check` over 200 commits' 'shell loop of `git checkout` + `git apply --check`' check_arpatch check_git
