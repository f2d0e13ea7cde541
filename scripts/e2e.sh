#!/usr/bin/env bash
# `make e2e`: pdrouter in front of a third-party vLLM emulator fleet.
#
# The engines are llm-d-inference-sim (the llm-d project's Go emulator of
# vLLM's OpenAI server, KV-cache events and NixlConnector P/D exchange), at the
# pinned release below, installed from the Go module proxy into .cache/bin.
# Nothing of pdrouter's own simulator (package sim) takes part.
#
#  1. installs the emulator (cached), the openai client (.cache/venv) and the
#     Kafka jars, and builds pdrouter;
#  2. starts a real Kafka broker of its own (scripts/kafka-local.sh), runs
#     `pdrouter migrate`, then `pdrouter serve --ingest` with a ZMQ SUB socket
#     bound for the emulators to dial;
#  3. starts 2 prefill and 2 decode emulators, each publishing its KV events
#     under its own topic, and registers them (POST /v1/workers);
#  4. drives the OpenAI front door with a multi-turn workload whose turns share
#     their prefixes (scripts/e2e_workload.py), and checks that follow-up turns
#     are routed by the prefix learned from the emulators' own events, that
#     remote prefill goes through the emulators' kv_transfer_params exchange,
#     that every decision has its outcome joined, and that pdrouter's /metrics
#     counted the emulators' events and scrapes with nothing lost.
#
# The emulator listens on every interface (it has no flag to choose one), so
# steps 2-4 run in a network namespace of their own whose only interface is
# loopback (unshare --net): nothing they start is reachable from elsewhere.
# Downloads and builds happen before, outside it.
#
# --bench (`make e2e-bench`) then benchmarks, on fresh emulators each time,
# pdrouter's front door and sglang-router's cache-aware policy in front of
# the same fleet with aiperf (both pinned, from PyPI), side by side.
#
# Everything it started is stopped on exit, whatever happens. docs/e2e.md has
# the details and the emulator's deviations from vLLM.
#
# Environment: PDR_E2E_KAFKA_PORT (default 39292; +1 for its controller),
# PDR_E2E_PORT_BASE (default 18300: the router's HTTP port, then its ZMQ port,
# then the four emulators, then sglang-router at +10), PDR_E2E_KEEP=1 (keep
# the run directory with every log). PDR_E2E_NETNS=0 runs without the
# namespace (the emulators then listen on every interface of the machine);
# only then is PDR_TEST_BROKERS, a broker already running, used.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=${E2E_START:-$(date +%s)}
step() { printf '\n== %s (%ds)\n' "$*" $(( $(date +%s) - start )); }
die() { echo "make e2e: FAIL: $*" >&2; exit 1; }

# The emulator release this check is pinned to (docs/e2e.md).
SIM_MODULE=github.com/llm-d/llm-d-inference-sim
SIM_VERSION=v0.10.2
SIM_BIN=$root/.cache/bin/llm-d-inference-sim
# The benchmark client and the peer router of --bench.
BENCH_PKGS=(aiperf==0.13.0 sglang-router==0.3.2)

bench="" inside=""
for a in "$@"; do
  case $a in
    --bench) bench=yes ;;
    --inside) inside=yes ;;
    *) echo "usage: scripts/e2e.sh [--bench]" >&2; exit 2 ;;
  esac
done

command -v go >/dev/null || die "Go is not installed (need go >= 1.26)"
command -v python3 >/dev/null || die "python3 is not installed"
command -v curl >/dev/null || die "curl is not installed"
case " ${GOFLAGS:-} " in *nomsgpack*) ;; *) export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=nomsgpack" ;; esac

# sim_version prints the module version the binary was built from.
sim_version() { go version -m "$SIM_BIN" 2>/dev/null | awk '$1 == "mod" && $2 == "'"$SIM_MODULE"'" {print $3}'; }

# ---- outside the namespace: what needs the registries -----------------------
if [ -z "$inside" ]; then
  step "the emulator $SIM_MODULE@$SIM_VERSION"
  if [ "$(sim_version)" != "$SIM_VERSION" ]; then
    # The emulator is pure Go (its ZMQ is go-zeromq/zmq4), so it builds
    # without cgo or libzmq. `go install module@version` is tried first; some
    # module proxies refuse the module's version list, which go install reads
    # for deprecation notices, so the fallback builds the same pinned version
    # as a dependency of a throwaway module (same build list: the emulator's
    # go.mod).
    mkdir -p .cache/bin
    log=$(mktemp)
    if ! GOFLAGS= CGO_ENABLED=0 GOBIN="$root/.cache/bin" go install "$SIM_MODULE/cmd/llm-d-inference-sim@$SIM_VERSION" 2>"$log"; then
      cat "$log"
      echo "go install failed; building the same version through a throwaway module"
      mod=$root/.cache/e2e-simmod
      rm -rf "$mod" && mkdir -p "$mod"
      (cd "$mod" && GOFLAGS= go mod init e2e.invalid/simbuild >/dev/null 2>&1 &&
        GOFLAGS= go get "$SIM_MODULE/cmd/llm-d-inference-sim@$SIM_VERSION" &&
        GOFLAGS= CGO_ENABLED=0 go build -trimpath -o "$SIM_BIN" "$SIM_MODULE/cmd/llm-d-inference-sim") ||
        die "could not build $SIM_MODULE@$SIM_VERSION"
    fi
    rm -f "$log"
  fi
  got=$(sim_version)
  [ "$got" = "$SIM_VERSION" ] || die "the emulator binary is $got, want $SIM_VERSION"
  echo "emulator: $SIM_MODULE $got ($SIM_BIN)"

  step "Python client (.cache/venv), pdrouter build, Kafka jars"
  [ -x .cache/venv/bin/python ] || python3 -m venv .cache/venv
  .cache/venv/bin/pip install -q --disable-pip-version-check "$(grep -E '^openai==' tests/python/requirements.txt)"
  make -s build >/dev/null
  ./scripts/kafka-local.sh install
  # The broker's readiness probe is a Go program of this module: compiled
  # now, while the module cache can still be filled.
  go build -o /dev/null ./scripts/kafkaready
  if [ -n "$bench" ]; then
    step "benchmark client and peer router (.cache/bench-venv: ${BENCH_PKGS[*]})"
    [ -x .cache/bench-venv/bin/python ] || python3 -m venv .cache/bench-venv
    .cache/bench-venv/bin/pip install -q --disable-pip-version-check "${BENCH_PKGS[@]}"
    .cache/bench-venv/bin/python scripts/e2e_tokenizer.py .cache/e2e-tokenizer 2>/dev/null
  fi

  if [ "${PDR_E2E_NETNS:-1}" != 0 ]; then
    command -v unshare >/dev/null || die "unshare (util-linux) is needed, or PDR_E2E_NETNS=0"
    command -v ip >/dev/null || die "ip (iproute2) is needed, or PDR_E2E_NETNS=0"
    [ -z "${PDR_TEST_BROKERS:-}" ] || echo "PDR_TEST_BROKERS cannot be reached from the run's network namespace: it starts a broker of its own"
    netns=(unshare --net)
    [ "$(id -u)" = 0 ] || netns+=(--map-root-user)
    E2E_START=$start exec "${netns[@]}" "$root/scripts/e2e.sh" --inside "$@"
  fi
else
  ip link set lo up
  unset PDR_TEST_BROKERS
fi

# ---- the run: loopback only -------------------------------------------------
base=${PDR_E2E_PORT_BASE:-18300}
http_port=$base
zmq_port=$((base + 1))
api=http://127.0.0.1:$http_port
model=e2e-model
pdr=$root/bin/pdrouter
workers=(prefill-1 prefill-2 decode-1 decode-2)
declare -A wport
port=$((base + 2))
for w in "${workers[@]}"; do wport[$w]=$port; port=$((port + 1)); done
run=$(mktemp -d "${TMPDIR:-/tmp}/pdrouter-e2e.XXXXXX")

pids=() sims=()
started_kafka=""
cleanup() {
  local rc=$? i
  # The emulators and sglang-router first, the router last (reverse start order).
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  for i in "${pids[@]}"; do wait "$i" 2>/dev/null || true; done
  if [ -n "$started_kafka" ]; then
    step "stopping the Kafka broker this run started"
    ./scripts/kafka-local.sh stop || true
  fi
  if [ "$rc" -ne 0 ]; then
    echo "make e2e: logs of the failed run:" >&2
    for f in "$run"/*.log; do [ -f "$f" ] && { echo "--- $f (last 20 lines)" >&2; tail -n 20 "$f" >&2; }; done
  fi
  if [ "${PDR_E2E_KEEP:-}" = 1 ] || [ "$rc" -ne 0 ]; then echo "run directory kept: $run" >&2; else rm -rf "$run"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_http URL WHAT: waits up to 60 s for URL to answer 2xx.
wait_http() {
  local _
  for _ in $(seq 1 120); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done
  die "$2 did not answer $1 within 60 s"
}

# start_emulators TAG: the four emulators, fresh (empty caches), logs
# $run/<worker><TAG>.log.
start_emulators() {
  local w
  for w in "${workers[@]}"; do
    # POD_IP only names the worker in its event topic (kv@<POD_IP>@<model>):
    # every emulator dials the one SUB socket ingest binds.
    POD_IP=$w "$SIM_BIN" --model "$model" --port "${wport[$w]}" --force-dummy-tokenizer \
      --enable-kvcache --use-vllm-map-event-format --kv-cache-size 2048 --block-size 16 \
      --zmq-endpoint "tcp://127.0.0.1:$zmq_port" --max-model-len 8192 --max-num-seqs 16 \
      --prefill-overhead 5ms --prefill-time-per-token 100us --inter-token-latency 2ms \
      --kv-cache-transfer-time-per-token 20us --seed 7 >"$run/$w$1.log" 2>&1 &
    pids+=($!)
    sims+=($!)
  done
  for w in "${workers[@]}"; do wait_http "http://127.0.0.1:${wport[$w]}/health" "emulator $w"; done
}

stop_emulators() {
  local p
  for p in "${sims[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  sims=()
}

if [ -z "${PDR_TEST_BROKERS:-}" ]; then
  step "a real Kafka broker (scripts/kafka-local.sh)"
  export PDR_KAFKA_PORT=${PDR_E2E_KAFKA_PORT:-39292}
  export PDR_KAFKA_CONTROLLER_PORT=$((PDR_KAFKA_PORT + 1))
  export PDR_KAFKA_DIR=$root/.cache/e2e-kafka
  ./scripts/kafka-local.sh wipe >/dev/null 2>&1 || true
  started_kafka=yes
  ./scripts/kafka-local.sh start
  eval "export $(./scripts/kafka-local.sh env)"
fi
# Topics of their own, so that a shared broker's earlier runs are not read.
export PDR_BROKERS=$PDR_TEST_BROKERS PDR_TOPIC_PREFIX="e2e-$(date +%s)-$$."
echo "brokers $PDR_BROKERS, topic prefix $PDR_TOPIC_PREFIX"

step "pdrouter migrate; pdrouter serve --ingest"
"$pdr" migrate --replication-factor 1 --min-insync-replicas 1 --partitions kv-events=2 >"$run/migrate.log" 2>&1 ||
  { cat "$run/migrate.log"; die "pdrouter migrate"; }
# A prompt whose uncached part is under 64 tokens, and under 70% of it, is
# prefilled on its decode worker; the others on a prefill worker: the first
# turn of a conversation goes remote, a follow-up whose prefix is cached local.
# start_router NAME CONFIG: pdrouter serve --ingest with that
# --router-conditional-disagg-config, its store in $run/data-NAME.
start_router() {
  "$pdr" serve --ingest --http-addr "127.0.0.1:$http_port" --data-dir "$run/data-$1" \
    --bind "tcp://127.0.0.1:$zmq_port" --scrape-interval 1s \
    --router-conditional-disagg --router-conditional-disagg-config "$2" >"$run/pdrouter-$1.log" 2>&1 &
  pids+=($!)
  router_pid=$!
  wait_http "$api/readyz" "pdrouter serve"
}
start_router checks '{"policy":"isl_bounding","eff_isl_threshold":64,"eff_isl_ratio_threshold":0.7}'

step "2 prefill + 2 decode emulators ($SIM_MODULE $(sim_version))"
start_emulators ""

step "registering the workers (POST /v1/workers)"
for w in "${workers[@]}"; do
  u=http://127.0.0.1:${wport[$w]}
  body=$(printf '{"worker_id":"%s","pool":"%s","model":"%s","block_size":16,"engine":"vllm","total_kv_blocks":2048,"max_num_batched_tokens":8192,"http_url":"%s","kv_events_topic":"kv@%s@%s","metrics_url":"%s/metrics"}' \
    "$w" "${w%%-*}" "$model" "$u" "$w" "$model" "$u")
  code=$(curl -sS -o "$run/register-$w.json" -w '%{http_code}' "$api/v1/workers" -H 'Content-Type: application/json' -d "$body")
  [ "$code" = 202 ] || { cat "$run/register-$w.json"; die "registering $w: HTTP $code"; }
done
n=0
for _ in $(seq 1 60); do
  n=$(curl -fsS "$api/v1/workers" | .cache/venv/bin/python -c 'import json,sys; d=json.load(sys.stdin); d=d.get("workers", d) if isinstance(d, dict) else d; print(len(d))' 2>/dev/null || echo 0)
  [ "$n" = 4 ] && break
  sleep 0.5
done
[ "$n" = 4 ] || die "the router lists $n workers, not 4"

step "the workload, through the front door ($api/v1)"
emulators=""
for w in "${workers[@]}"; do emulators+="$w=http://127.0.0.1:${wport[$w]},"; done
emulators=${emulators%,}
.cache/venv/bin/python scripts/e2e_workload.py --api "$api" --model "$model" \
  --engines "$emulators" --ids "$run/decision-ids.txt" | tee "$run/workload.out"
[ "${PIPESTATUS[0]}" = 0 ] || die "the workload's checks"

step "outcomes joined to decisions (pdrouter export decisions --check-outcomes)"
"$pdr" export decisions --check-outcomes "$run/decision-ids.txt" --check-outcomes-wait 30s 2>"$run/export.log" ||
  die "outcomes missing"

step "pdrouter /metrics: the emulators' KV events and scrapes"
curl -fsS "$api/metrics" >"$run/metrics.txt"
# The workers the decisions used (decode and prefill columns of the
# workload's table): each must have published stored blocks that ingest
# counted. Which decode worker a chat's first turn lands on is the tie hash
# of its request id, so one of two may serve none.
served=$(awk '$4 == "local" || $4 == "remote" { print $5; if ($6 != "-") print $6 }' "$run/workload.out" | sort -u | paste -sd,)
.cache/venv/bin/python scripts/e2e_workload.py --check-metrics "$run/metrics.txt" --workers "$served" ||
  die "pdrouter /metrics"

step "PASS: pdrouter in front of $SIM_MODULE $SIM_VERSION"
[ -n "$bench" ] || exit 0

# ---- --bench ------------------------------------------------------------------
# One aiperf workload, on fresh emulators each time: multi-turn chats whose
# turns share a per-session context, streamed, 4 sessions at once. Its
# goodput SLO follows the emulators' latency model above (a 300-token
# uncached prefill costs ~35 ms, a token 2 ms).
aiperf_run() { # aiperf_run NAME URL
  mkdir -p "$run/bench-$1"
  # pdrouter's own account of what its door adds, before and after.
  [ "$2" != "$api" ] || curl -fsS "$api/metrics" >"$run/bench-$1/router-before.prom"
  .cache/bench-venv/bin/aiperf profile --model "$model" --tokenizer "$root/.cache/e2e-tokenizer" \
    --url "$2" --endpoint-type chat --streaming --random-seed 7 \
    --conversation-num 24 --conversation-turn-mean 4 --conversation-turn-stddev 0 \
    --conversation-turn-delay-mean 1500 --conversation-turn-delay-stddev 0 \
    --user-context-prompt-length 300 --synthetic-input-tokens-mean 40 --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean 24 --output-tokens-stddev 0 --concurrency 4 \
    --goodput "time_to_first_token:40 inter_token_latency:5" \
    --ui-type none --artifact-dir "$run/bench-$1" >"$run/aiperf-$1.log" 2>&1 ||
    die "aiperf against $1 (see $run/aiperf-$1.log)"
  [ "$2" != "$api" ] || curl -fsS "$api/metrics" >"$run/bench-$1/router-after.prom"
  local w
  for w in "${workers[@]}"; do curl -fsS "http://127.0.0.1:${wport[$w]}/metrics" >"$run/bench-$1/engine-$w.prom"; done
}

step "bench: aiperf through pdrouter's front door (2 prefill + 2 decode, the checks' policy, fresh emulators)"
stop_emulators
start_emulators "-bench-pdrouter"
aiperf_run pdrouter "$api"

step "bench: aiperf through pdrouter, isl_bounding at its defaults (prefill local below 2048 uncached tokens), fresh emulators"
stop_emulators
kill "$router_pid" && wait "$router_pid" 2>/dev/null || true
start_router defaults '{"policy":"isl_bounding"}'
start_emulators "-bench-pdrouter-local"
aiperf_run pdrouter-local "$api"

step "bench: aiperf through sglang-router --policy cache_aware (the 4 emulators as aggregated workers, fresh)"
stop_emulators
start_emulators "-bench-sglang"
sg_port=$((base + 10))
urls=()
for w in "${workers[@]}"; do urls+=("http://127.0.0.1:${wport[$w]}"); done
.cache/bench-venv/bin/python -m sglang_router.launch_router --host 127.0.0.1 --port "$sg_port" \
  --policy cache_aware --worker-urls "${urls[@]}" >"$run/sglang-router.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$sg_port/health" "sglang-router"
aiperf_run sglang "http://127.0.0.1:$sg_port"

step "bench: side by side"
.cache/venv/bin/python scripts/e2e_workload.py --bench-report "pdrouter=$run/bench-pdrouter,pdrouter (defaults)=$run/bench-pdrouter-local,sglang-router=$run/bench-sglang" |
  tee "$run/bench.txt"
