#!/usr/bin/env bash
# `make test`: everything the test suite needs, on a fresh machine.
#
#  1. The dependencies of the Go modules (the product at the root, the
#     deployment checks in deployments/, the pod watcher in discovery/), and
#     the Python test packages (.cache/venv).
#  2. A real Apache Kafka 4.x broker, unless PDR_TEST_BROKERS names one:
#     installed from Maven Central jars (cached) and started on 127.0.0.1 by
#     scripts/kafka-local.sh, stopped again on exit, whatever happens.
#  3. go.mod/go.sum tidy, gofmt, every Go test of every module (with the
#     race detector, and go vet's every analyzer in the same pass) against
#     that broker, the Python tests, and a short run of every fuzz target.
#     The Go steps are arranged so that, on an empty build cache, each
#     configuration of the build (race, static, fuzzing) compiles once, and
#     so that what waits on the network or on the broker overlaps with what
#     needs the CPU; see the comments at each step.
#  4. A table of the seconds each step took, at the end, pass or fail.
#
# Under CI=true the integration tests fail, not skip, without a broker.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
# step names a step and prints it with the seconds since the start; each
# step's time is kept for the table printed at the end, pass or fail.
# The table has the CPU-seconds of each step too (user + system, of this
# script and of every process it started, in the background or not): on a
# machine shared with other work, wall time says little, CPU time what the
# step costs. A background job's CPU counts in the step during which it was
# spent.
step_names=()
step_starts=()
step_cpus=()
clk_tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
# tree_cpu prints the clock ticks of CPU (user + system) that this script
# and its descendants have used so far: those of every live process of the
# tree, with the ticks of the children each has already reaped. A process
# that outlives its parent (the broker's JVM, started with nohup) leaves the
# tree, as it leaves /usr/bin/time's count.
tree_cpu() {
  # A process that exits between the glob and the read makes cat fail:
  # under pipefail that failed the whole script.
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root=$$ '
    {
      pid = $1
      sub(/^.*\) /, "")
      parent[pid] = $2
      ticks[pid] = $12 + $13 + $14 + $15
    }
    END {
      for (p in parent) kids[parent[p]] = kids[parent[p]] " " p
      n = 1; todo[1] = root; sum = 0
      while (n > 0) {
        p = todo[n--]
        sum += ticks[p]
        m = split(kids[p], c, " ")
        for (j = 1; j <= m; j++) todo[++n] = c[j]
      }
      print sum
    }'
}
start_cpu=$(tree_cpu)
step() {
  step_names+=("$*")
  step_starts+=("$(date +%s)")
  step_cpus+=("$(tree_cpu)")
  printf '\n== %s (%ds)\n' "$*" $(( $(date +%s) - start ))
}
# cpu_secs TICKS prints TICKS as CPU-seconds.
cpu_secs() { awk -v t="$1" -v hz="$clk_tck" 'BEGIN { printf "%.0f", t / hz }'; }
timings() {
  local i n=${#step_names[@]} end now cpu_end cpu_now
  [ "$n" -gt 0 ] || return 0
  now=$(date +%s)
  cpu_now=$(tree_cpu)
  printf '\n== make test: wall seconds and CPU-seconds (user + system) per step\n'
  printf '%6s %6s\n' wall cpu
  for ((i = 0; i < n; i++)); do
    end=$now
    cpu_end=$cpu_now
    if [ $((i + 1)) -lt "$n" ]; then
      end=${step_starts[$((i + 1))]}
      cpu_end=${step_cpus[$((i + 1))]}
    fi
    printf '%6d %6s  %s\n' $((end - step_starts[i])) "$(cpu_secs $((cpu_end - step_cpus[i])))" "${step_names[$i]}"
  done
  printf '%6d %6s  total\n' $((now - start)) "$(cpu_secs $((cpu_now - start_cpu)))"
}

command -v go >/dev/null || { echo "make test: Go is not installed (need go >= 1.26)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "make test: python3 is not installed" >&2; exit 1; }

# The Go modules of this repository: the product; the deployment checks, a
# module of their own so that the product does not depend on a Prometheus
# server, kustomize and the Kubernetes API types; and the Kubernetes pod
# watcher (discovery/), so that the product does not depend on client-go.
go_modules=(. deployments discovery)
inmod() { (cd "$1" && shift && "$@"); }

# The build tags of the Makefile (nomsgpack, pebblegozstd: it says why); the
# same flags here keep make test's builds those builds, whether it runs from
# make or by itself.
case " ${GOFLAGS:-} " in *-tags=nomsgpack,pebblegozstd*) ;; *) export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=nomsgpack,pebblegozstd" ;; esac

# Background jobs, each in its own process group so that cleanup can stop
# the go commands and the JVM they started too.
bg_pids=()
started=""
cleanup() {
  local p
  for p in "${bg_pids[@]}"; do kill -- -"$p" 2>/dev/null || true; done
  [ -z "${logs:-}" ] || rm -rf "$logs"
  if [ -n "$started" ]; then
    step "stopping the Kafka broker this run started"
    ./scripts/kafka-local.sh stop || true
  fi
  timings
}
trap cleanup EXIT
background() { # background LOG CMD...: runs CMD in the background; sets bg_pid
  local log=$1; shift
  set -m
  "$@" >"$log" 2>&1 &
  bg_pid=$!
  set +m
  bg_pids+=("$bg_pid")
}
# await PID LOG WHAT: waits for a background job; on failure prints its log.
await() {
  wait "$1" || { cat "$2" >&2; echo "make test: $3 failed" >&2; exit 1; }
}

# The downloads (Go modules, Python packages, the broker's jars) wait on the
# network, not the CPU, so they run side by side, and meanwhile the standard
# library compiles for the race build, the configuration that the vet and
# test steps below share.
step "Go modules, the broker and the race build of the standard library's packages we import (in the background); Python test packages"
logs=$(mktemp -d)
get_modules() {
  local m
  for m in "${go_modules[@]}"; do inmod "$m" go mod download || return 1; done
}
background "$logs/gomod" get_modules
gomod_pid=$bg_pid
# Not the whole standard library: the packages that the repository's Go
# files import, with what they import, and the test runner's. The whole of it
# took 56 CPU-seconds for -race, 12 of them on about 100 packages that no
# test reaches (image/..., go/types, net/rpc, ...); the few that only a
# dependency imports compile with the tests.
std_imports() {
  local goroot p
  goroot=$(go env GOROOT)
  echo testing/internal/testdeps
  git grep -h -E '^[[:space:]]*(import[[:space:]]+)?([A-Za-z_.][A-Za-z0-9_]*[[:space:]]+)?"[a-z0-9/]+"[[:space:]]*$' -- '*.go' |
    sed -E 's/.*"([^"]+)".*/\1/' | sort -u | while read -r p; do
    if [ -d "$goroot/src/$p" ]; then echo "$p"; fi
  done
}
background "$logs/std" go build -race $(std_imports)
std_pid=$bg_pid

if [ -z "${PDR_TEST_BROKERS:-}" ]; then
  # Installed and started while the Go tests compile and the unit tests run:
  # each integration test waits for the file PDR_TEST_BROKER_READY, which
  # says "ok" once the broker answers, or why it did not start
  # (internal/kafkatest).
  export PDR_TEST_BROKER_READY="$logs/broker-ready"
  start_broker() {
    local rc=0
    { ./scripts/kafka-local.sh install &&
      { ./scripts/kafka-local.sh wipe >/dev/null 2>&1 || true; } &&
      ./scripts/kafka-local.sh start; } || rc=$?
    if [ "$rc" -eq 0 ]; then echo ok; else echo "scripts/kafka-local.sh failed (exit $rc): see make test's output"; fi >"$PDR_TEST_BROKER_READY.tmp"
    mv "$PDR_TEST_BROKER_READY.tmp" "$PDR_TEST_BROKER_READY"
    return "$rc"
  }
  started=yes
  background "$logs/kafka" start_broker
  kafka_pid=$bg_pid
  eval "export $(./scripts/kafka-local.sh env)"
fi

[ -x .cache/venv/bin/python ] || python3 -m venv .cache/venv
.cache/venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt

step "Go modules downloaded; go.mod and go.sum tidy"
await "$gomod_pid" "$logs/gomod" "go mod download"
await "$std_pid" "$logs/std" "go build -race of the standard library's packages"
for m in "${go_modules[@]}"; do
  inmod "$m" go mod tidy -diff || { echo "make test: run 'go mod tidy' in $m" >&2; exit 1; }
done

echo "PDR_TEST_BROKERS=$PDR_TEST_BROKERS"
export PDR_TEST_BROKERS
export PDR_KAFKA_SCRIPT="$root/scripts/kafka-local.sh"

# gofmt and the files built only without the race detector come first: they
# need no build. -race sets the race build tag, so the packages that hold a
# file built only without it (internal/testsize) are vetted once more without
# -race below: no file goes unvetted, and those packages import nothing to
# compile.
step "gofmt; go vet of the files built without -race"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*'))
if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted" >&2; exit 1; fi
norace_pkgs=$(git grep -lE '^//go:build.*race' -- '*.go' | xargs -r -n1 dirname | sort -u | sed 's|^|./|')
if [ -n "$norace_pkgs" ]; then go vet $norace_pkgs; fi

# The binary and the export fixture are built once more, without -race, as
# the release builds them (the Dockerfile: CGO_ENABLED=0, -trimpath): the
# deployment checks build the binary that way, and the Python tests run
# those very builds (PDR_BIN, PDR_EXPORTFIXTURE), so no test compiles a
# third configuration. The fuzz smoke's test binaries (the last step), one
# per package, are built then too, after the release build whose packages
# they reuse, into $logs/fuzzbin, where the smoke finds them. None of it
# shares a package with the race build. The
# race tests leave the CPU partly idle while they wait on the broker, so
# this build runs meanwhile at the lowest priority; should it fail, the
# build before the Python tests builds again and reports why (if it did not,
# that build is not run again: a go build links each time).
release_build() {
  env CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$@"
}
bindir="$root/.cache/bin"
mkdir -p "$bindir"
warm_builds() {
  renice -n 19 -p "$BASHPID" >/dev/null
  release_build "$bindir/pdrouter" ./cmd/pdrouter &&
    release_build "$bindir/exportfixture" ./replay/internal/exportfixture &&
    touch "$logs/release-built"
  PDR_FUZZ_BIN="$logs/fuzzbin" ./scripts/fuzz.sh build
}
# The fuzz smoke's coverage counts the repository's packages; the rest of
# its binaries is the release build's (scripts/fuzz.sh, PDR_FUZZ_SCOPE): an
# instrumented build of the whole graph, standard library and dependencies
# included, took 220 CPU-seconds on empty caches, against 54 so. `make fuzz`
# instruments everything; PDR_FUZZ_SCOPE=all makes the smoke do the same.
export PDR_FUZZ_SCOPE=${PDR_FUZZ_SCOPE:-module}

step "Go tests with go vet (race detector, real broker)"
# One go command per module compiles, vets and tests every package, in one
# pipeline: a package's tests start as soon as it and its dependencies are
# built, while the rest still compiles, and the integration tests wait for
# the broker that is still starting (PDR_TEST_BROKER_READY) while the unit
# tests run. -vet=all runs every analyzer of go vet (not go test's short
# list), on the race build that the tests themselves use, so the code is
# vetted without a second pass over the build.
# -ldflags=-w: no DWARF in the test binaries, which nobody debugs here;
# linking a race test binary with it took 2-4 times as long (cmd/pdrouter:
# 6-13 s against 3.4 s), and race reports still name file and line (they
# come from the runtime's own tables).
# -exec scripts/gotest-exec.sh runs cmd/pdrouter's binary, whose tests take
# the longest of any package and cannot run in parallel within it, as
# PDR_TEST_SHARDS processes side by side (the script says why).
# -p: packages tested at once. Many tests wait on the broker or on
# processes they started, which left half the CPU idle at -p 2 (the
# default on 2 cores); 4 at once kept it ~80% busy.
# The output is kept so that, on failure, the race reports (whose second
# stack is otherwise scrolled far above the summary) are printed again last.
gotest_log=$(mktemp)
race_build=(-race -vet=all -ldflags=-w -exec "$root/scripts/gotest-exec.sh")
export PDR_SHARD_PKG=cmd/pdrouter
gotest_all() {
  local m rc=0
  for m in "${go_modules[@]}"; do
    inmod "$m" go test "${race_build[@]}" -count=1 -timeout 30m -p "${PDR_TEST_PARALLEL:-4}" ./... || rc=1
  done
  return $rc
}
background /dev/null warm_builds
warm_pid=$bg_pid
if ! gotest_all 2>&1 | tee "$gotest_log"; then
  if grep -q 'WARNING: DATA RACE' "$gotest_log"; then
    step "data race reports, repeated"
    awk '/WARNING: DATA RACE/{on=1} on{print} on && /^==================$/{on=0}' "$gotest_log" | head -400 || true
  fi
  if [ -n "${kafka_pid:-}" ] && ! kill -0 "$kafka_pid" 2>/dev/null && [ "$(cat "$PDR_TEST_BROKER_READY" 2>/dev/null)" != ok ]; then
    echo "make test: the Kafka broker did not start:" >&2
    cat "$logs/kafka" >&2
  fi
  echo "Go tests failed: see FAIL lines above" >&2
  rm -f "$gotest_log"
  exit 1
fi
rm -f "$gotest_log"
if [ -n "${kafka_pid:-}" ]; then
  await "$kafka_pid" "$logs/kafka" "starting the Kafka broker"
  # The broker is stopped by its script, not killed: its job leaves the list.
  keep=()
  for pid in "${bg_pids[@]}"; do [ "$pid" = "$kafka_pid" ] || keep+=("$pid"); done
  bg_pids=("${keep[@]}")
fi
# Before the broker restart below, which must run alone.
wait "$warm_pid" || true

if [ -n "$started" ]; then
  # Restarts the broker under load, so it runs alone, after the rest.
  step "audit guarantee across a broker restart (real broker)"
  # Built as the release is, so that it reuses that build's packages rather
  # than compiling the whole graph once more in a fourth configuration.
  PDR_TEST_BROKER_RESTART=1 CGO_ENABLED=0 go test -trimpath -buildvcs=false -vet=off -ldflags=-w \
    -count=1 -timeout 5m -run 'TestAnsweredDecisionsSurviveBrokerRestart' -v ./cmd/pdrouter
fi

# The long property tests whose code runs on one goroutine check only a
# sample of their cases under -race (internal/testsize says why); here they
# run whole, without it. Each test that sizes itself is found by its call of
# testsize.Cases, so none can be left out of this pass. Built as the release
# is (CGO_ENABLED=0, -trimpath), they reuse its compiled dependencies.
sized_tests() {
  git grep -l 'testsize\.Cases' -- '*_test.go' | while read -r f; do
    awk -v d="./$(dirname "$f")" '/^func Test/ { n = $2; sub(/\(.*/, "", n) } /testsize\.Cases/ && n { print d, n }' "$f"
  done | sort -u
}
sized=$(sized_tests)
if [ -n "$sized" ]; then
  step "property tests whole, without the race detector: $(echo "$sized" | cut -d' ' -f2 | tr '\n' ' ')"
  CGO_ENABLED=0 go test -trimpath -buildvcs=false -vet=off -ldflags=-w -count=1 \
    -run "^($(echo "$sized" | cut -d' ' -f2 | paste -sd'|'))\$" $(echo "$sized" | cut -d' ' -f1 | sort -u)
fi

# The fuzz smoke and the Python tests run side by side: the Python tests
# spend much of their time waiting on the processes they start, which the
# fuzzers' CPU fills. Two targets at once, one worker each: the same fuzzing
# per target as one at a time with two workers, in half the wall time (each
# target's start-up, its baseline and its link, is serial). Its output is
# printed whole after the Python tests'.
step "fuzz smoke (${PDR_FUZZTIME:-5s} per target, ${PDR_FUZZ_JOBS:-2} at once, in the background) and Python tests (on the release build)"
background "$logs/fuzz" env PDR_FUZZ_FRESH=1 PDR_FUZZ_JOBS="${PDR_FUZZ_JOBS:-2}" PDR_FUZZ_BIN="$logs/fuzzbin" ./scripts/fuzz.sh "${PDR_FUZZTIME:-5s}"
fuzz_pid=$bg_pid
if [ ! -f "$logs/release-built" ]; then
  release_build "$bindir/pdrouter" ./cmd/pdrouter
  release_build "$bindir/exportfixture" ./replay/internal/exportfixture
fi
PDR_BIN="$bindir/pdrouter" PDR_EXPORTFIXTURE="$bindir/exportfixture" .cache/venv/bin/python -m pytest -q tests/python

step "fuzz smoke: its output"
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
cat "$logs/fuzz"
[ "$fuzz_rc" -eq 0 ] || { echo "make test: the fuzz smoke failed (see above)" >&2; exit 1; }

step "make test passed"
