#!/usr/bin/env bash
# Runs every Go fuzz target of the repository for $1 (default 15s) each.
# `go test -fuzz` takes one target in one package at a time, so this finds
# them all and loops. The repository holds more than one Go module (the
# product at the root, the deployment checks in deployments/), so each target
# runs from the module that holds its package.
# Minimizing an input that widened coverage is bounded to $2 (default 200
# executions): it is not counted in the fuzzer's execs, and unbounded (60 s)
# it took a whole short run. Targets whose code runs goroutines (Pebble in
# FuzzApply) see coverage that varies from run to run, so they find "new"
# inputs to minimize all the time.
# With PDR_FUZZ_FRESH=1 (make test's smoke), each target starts from its
# seeds alone: the inputs that earlier runs added to the build cache's corpus
# are removed first. Replaying that corpus ("gathering baseline coverage")
# counts against -fuzztime, and on a machine that has fuzzed before it filled
# a short run whole (10 of 23 targets executed no new input in 5 s), so a
# smoke would fuzz only on fresh machines. `make fuzz` keeps the corpus.
# Each package's fuzzing test binary (instrumented for coverage, in a build
# configuration of its own: PDR_FUZZ_SCOPE below) is linked once, with go test -c, and every target of the package runs from it, as
# go test -fuzz runs it (same flags, in the package's directory, the same
# corpus directory in the build cache). go test -fuzz per target would link
# the binary again for each of its targets (test binaries are not cached)
# and load the module's packages again: that was most of the CPU of a short
# smoke.
# The binaries go to $PDR_FUZZ_BIN (default: a temporary directory). With
# $1 = build, it only builds them there, so that `make test` can compile
# them while the race tests leave the CPU partly idle; a later run with the
# same $PDR_FUZZ_BIN uses the binaries it finds there and builds the rest.
# The caller owns that directory: a binary in it is taken as current.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-15s}
minimize=${2:-200x}

# modroot prints the nearest directory at or above $1 that holds a go.mod.
modroot() {
  local d=$1
  until [ -f "$d/go.mod" ]; do d=$(dirname "$d"); done
  echo "$d"
}

targets=$(grep -rl --include='*_test.go' --exclude-dir=.cache '^func Fuzz' . | sort)
# One line per fuzz target: its module, its package (relative to the module)
# and its name.
list=$(for f in $targets; do
  dir=$(dirname "${f#./}")
  mod=$(modroot "$dir")
  case $mod in
    .) pkg=./$dir ;;
    "$dir") pkg=. ;;
    *) pkg=./${dir#"$mod"/} ;;
  esac
  for fn in $(grep -oE '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
    echo "$mod $pkg $fn"
  done
done)

bindir=${PDR_FUZZ_BIN:-}
if [ -z "$bindir" ]; then
  bindir=$(mktemp -d)
  trap 'rm -rf "$bindir"' EXIT
fi
mkdir -p "$bindir"
bindir=$(cd "$bindir" && pwd)
# testbin MOD PKG prints the path of the package's fuzzing test binary.
testbin() { printf '%s/%s.test\n' "$bindir" "$(printf '%s/%s' "$1" "$2" | tr -c 'A-Za-z0-9_\n' '_')"; }
# What the fuzzers' coverage counts, $PDR_FUZZ_SCOPE:
#  all (the default): every package of the binary, the standard library's
#    and the dependencies' too, as go test -fuzz instruments it; a build
#    configuration of its own, whole (about 220 CPU-seconds on empty caches).
#  module: the repository's packages only, whose branches the fuzz targets
#    are written to reach; the rest is built as the release is
#    (CGO_ENABLED=0, -trimpath), so that where make test has built the
#    release already, only the repository's packages compile again.
#    `make test`'s short smoke fuzzes so; `make fuzz` instruments all.
scope=${PDR_FUZZ_SCOPE:-all}
modpath=$(awk '$1 == "module" { print $2; exit }' go.mod)
case $scope in
  all) ;;
  module) ;;
  *) echo "fuzz.sh: PDR_FUZZ_SCOPE must be all or module, got '$scope'" >&2; exit 2 ;;
esac
# build_bins builds the fuzzing test binary of each package that has none
# yet in $bindir. -vet=off: fuzzing instruments packages, so go test's vet
# pass would recompute their dependencies' facts on that build again; go vet
# (make vet, make test) is where the code is vetted. -ldflags=-w: no DWARF,
# as in make test's other test builds (linking is then a third of the
# time). -fuzz names one target: the instrumentation is the same for all.
# -d=libfuzzer is the compiler flag of go test -fuzz's instrumentation.
build_bins() {
  echo "$list" | awk '!seen[$1" "$2]++' | while read -r mod pkg fn; do
    bin=$(testbin "$mod" "$pkg")
    [ ! -x "$bin" ] || continue
    if [ "$scope" = module ]; then
      (cd "$mod" && CGO_ENABLED=0 go test "$pkg" -trimpath -vet=off -ldflags=-w -c -o "$bin" \
        -gcflags="$modpath/...=-d=libfuzzer")
    else
      (cd "$mod" && go test "$pkg" -vet=off -ldflags=-w -c -o "$bin" -fuzz "^${fn}\$")
    fi
  done
}
build_bins
[ "$fuzztime" != build ] || exit 0

# PDR_FUZZ_JOBS targets fuzz at once (default 1), each with that share of
# the machine's cores as workers (-parallel). Two at a time with one worker
# each nearly halves a smoke's wall time (make test runs them so). Under
# that contention go test's fuzzing coordinator can race its own -fuzztime
# deadline and fail a target that found nothing; deadline_race below tells
# that apart from a real failure.
jobs=${PDR_FUZZ_JOBS:-1}
workers=$(( $(nproc) / jobs ))
[ "$workers" -ge 1 ] || workers=1
# The corpus that go test -fuzz keeps for a package: under the build
# cache's fuzz directory, by import path (the module's path and the package's
# directory in it).
fuzzcache=$(go env GOCACHE)/fuzz
export fuzztime minimize workers fuzzcache bindir
export -f testbin
fuzz_one() {
  local mod=$1 pkg=$2 fn=$3 importpath
  importpath=$(awk '$1 == "module" { print $2; exit }' "$mod/go.mod")${pkg#.}
  if [ "${PDR_FUZZ_FRESH:-}" = 1 ]; then
    rm -rf "${fuzzcache:?}/$importpath/$fn"
  fi
  # The flags go test -fuzz gives the binary (-test.paniconexit0, the
  # corpus directory, its default timeout), in the package's directory,
  # where the seeds (testdata/fuzz) are read and a failing input is written.
  local out rc=0
  out=$(cd "$mod/$pkg" && "$(testbin "$mod" "$pkg")" -test.paniconexit0 -test.timeout=10m0s \
    -test.fuzzcachedir="$fuzzcache/$importpath" -test.run='^$' -test.fuzz="^${fn}\$" -test.fuzztime="$fuzztime" \
    -test.fuzzminimizetime="$minimize" -test.parallel="$workers" 2>&1) || rc=$?
  # One block per target, whole, so that parallel targets do not interleave.
  printf 'fuzz %s %s for %s\n%s\n' "$pkg" "$fn" "$fuzztime" "$out"
  if [ "$rc" -ne 0 ] && deadline_race "$out"; then
    echo "fuzz $pkg $fn: no input failed; the run ended on go test's own -fuzztime race (golang/go#75804, fixed in Go 1.27)"
    return 0
  fi
  return $rc
}
# deadline_race: the output is that of go test's fuzzing coordinator racing
# its own -fuzztime deadline (golang/go#75804: "context deadline exceeded"
# exactly as the time ends, under CPU contention), and of nothing else: no
# input was written as failing, nothing panicked, no test logged an error.
deadline_race() {
  grep -q 'context deadline exceeded' <<<"$1" &&
    ! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:|fatal error:|DATA RACE' <<<"$1"
}
export -f deadline_race
export -f fuzz_one
echo "$list" | xargs -P "$jobs" -L 1 bash -c 'fuzz_one "$@"' _
