#!/usr/bin/env bash
# Runs every Go fuzz target in the module for $1 (default 15s) each.
# `go test -fuzz` takes one target in one package at a time, so this finds
# them all and loops.
# Minimizing an input that widened coverage is bounded to $2 (default 200
# executions): it is not counted in the fuzzer's execs, and unbounded (60 s)
# it took a whole short run. Targets whose code runs goroutines (Pebble in
# FuzzApply) see coverage that varies from run to run, so they find "new"
# inputs to minimize all the time.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-15s}
minimize=${2:-200x}
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
for f in $targets; do
  pkg=./$(dirname "${f#./}")
  for fn in $(grep -oE '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
    echo "fuzz $pkg $fn for $fuzztime"
    go test "$pkg" -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize"
  done
done
