#!/usr/bin/env bash
# gotest-exec.sh: the -exec program of `make test`'s `go test`. It runs each
# package's test binary as it is, except the one of $PDR_SHARD_PKG
# (cmd/pdrouter), whose tests run the CLI in-process and so cannot be
# t.Parallel (its process-wide state: the metrics registry, the GC
# settings): that binary runs as $PDR_TEST_SHARDS processes side by side,
# each given every Nth of its tests. Going through `go test -exec` rather than
# a `go test -c` of its own keeps one go command for the whole module, so the
# package is compiled and vetted once, in the same pipeline as every other,
# and its tests start as soon as it is linked.
#
# Each shard's output is kept and printed whole, one shard after the other,
# so that the go command reads one binary's output; the exit status is the
# first failing shard's.
set -uo pipefail
bin=$1
shift
n=${PDR_TEST_SHARDS:-3}
case "$PWD" in
*/"${PDR_SHARD_PKG:-cmd/pdrouter}") ;;
*) exec "$bin" "$@" ;;
esac
for a in "$@"; do
  # A run that names its tests (go test -run) is not sharded.
  case "$a" in -test.run=* | -test.run | -test.list=* | -test.list) exec "$bin" "$@" ;; esac
done
[ "$n" -gt 1 ] || exec "$bin" "$@"
names=$("$bin" -test.list '.*' | grep -E '^(Test|Fuzz|Example)') || exec "$bin" "$@"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pids=()
for ((i = 0; i < n; i++)); do
  share=$(awk -v n="$n" -v i="$i" 'NR % n == i' <<<"$names" | paste -sd'|')
  [ -n "$share" ] || continue
  "$bin" "$@" -test.run "^($share)\$" >"$out/$i" 2>&1 &
  pids+=("$i:$!")
done
rc=0
for p in "${pids[@]}"; do
  i=${p%%:*}
  wait "${p#*:}" || { [ "$rc" -ne 0 ] || rc=$?; echo "--- shard $((i + 1)) of $n failed" >>"$out/$i"; }
done
for p in "${pids[@]}"; do cat "$out/${p%%:*}"; done
exit "$rc"
