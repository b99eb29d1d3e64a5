#!/usr/bin/env bash
# stress.sh runs e2e tests N times in a row beside a CPU hog that keeps every core
# busy (one busy loop per core, at the tests' own priority), and counts the failures:
# the load test every new e2e test passes before it is called done (`make stress
# RUN='^TestX$$' N=50`). Logs of failed runs are kept in $OUT (default
# bin/stress/<time>); the hog and every test process end with the script.
set -euo pipefail
run=${1:?usage: stress.sh REGEXP [N] [PKG]}
n=${2:-50}
pkg=${3:-./e2e/}
bin=${WEFT_BIN:-$PWD/bin}
out=${OUT:-$bin/stress/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
hogs=()
cleanup() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM
# STRESS_NO_HOG=1: another stress run's hog (or one of the caller's) keeps the cores
# busy already.
if [ -z "${STRESS_NO_HOG:-}" ]; then
	for _ in $(seq "$(nproc)"); do
		bash -c 'while :; do :; done' &
		hogs+=($!)
	done
fi
# One build, n runs: the test binary is compiled once.
testbin="$out/e2e.test"
go test -c -o "$testbin" "$pkg"
dir=$(cd "$pkg" && pwd)
fail=0
for i in $(seq "$n"); do
	start=$(date +%s)
	ok=0
	(cd "$dir" && WEFT_E2E=1 WEFT_BIN="$bin" "$testbin" -test.run "$run" -test.count=1 -test.timeout 20m -test.v) >"$out/run-$i.log" 2>&1 || ok=$?
	# Each top-level test's verdict, for the count per test at the end.
	grep -E '^--- (PASS|FAIL|SKIP): Test[^ /]+ ' "$out/run-$i.log" | awk '{print $2, $3}' >>"$out/results" || true
	if [ "$ok" -eq 0 ]; then
		echo "run $i/$n: ok ($(( $(date +%s) - start )) s)"
		rm -f "$out/run-$i.log"
	else
		fail=$((fail + 1))
		echo "run $i/$n: FAIL ($(( $(date +%s) - start )) s): $out/run-$i.log"
		grep -E '^\s+--- FAIL|_test.go:[0-9]+:' "$out/run-$i.log" | head -5 || true
	fi
done
echo "per test (verdict, test, runs):"
sort "$out/results" 2>/dev/null | uniq -c | awk '{print "  " $2, $3, $1}'
echo "stress: $((n - fail)) passed, $fail failed ($run, $n runs beside a $(nproc)-core CPU hog${STRESS_NO_HOG:+ of another run})"
[ "$fail" -eq 0 ]
