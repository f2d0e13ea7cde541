#!/usr/bin/env bash
# `make e2e`: pdrouter in front of a third-party vLLM emulator fleet.
#
# The engines are llm-d-inference-sim (the llm-d project's Go emulator of
# vLLM's OpenAI server, KV-cache events and NixlConnector P/D exchange), at the
# pinned release below, installed from the Go module proxy into .cache/bin.
# Nothing of pdrouter's own simulator (package sim) takes part.
#
#  1. installs the emulator (cached), the openai client (.cache/venv) and, unless
#     PDR_TEST_BROKERS names one, starts a real Kafka broker on its own ports
#     (scripts/kafka-local.sh);
#  2. builds pdrouter, runs `pdrouter migrate`, then `pdrouter serve --ingest`
#     on loopback with a ZMQ SUB socket bound for the emulators to dial;
#  3. starts 2 prefill and 2 decode emulators on loopback, each publishing its
#     KV events under its own topic, and registers them (POST /v1/workers);
#  4. drives the OpenAI front door with a multi-turn workload whose turns share
#     their prefixes (scripts/e2e_workload.py), and checks that follow-up turns
#     are routed by the prefix learned from the emulators' own events, that
#     remote prefill goes through the emulators' kv_transfer_params exchange,
#     that every decision has its outcome joined, and that pdrouter's /metrics
#     counted the emulators' events and scrapes.
#
# Everything it started is stopped on exit, whatever happens. docs/e2e.md has
# the details and the emulator's deviations from vLLM.
#
# Environment: PDR_TEST_BROKERS (use that broker), PDR_E2E_KAFKA_PORT (default
# 39292; +1 for its controller), PDR_E2E_PORT_BASE (default 18300: the router's
# HTTP port, then its ZMQ port, then the four emulators), PDR_E2E_KEEP=1 (keep
# the run directory with every log).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
step() { printf '\n== %s (%ds)\n' "$*" $(( $(date +%s) - start )); }
die() { echo "make e2e: FAIL: $*" >&2; exit 1; }

# The emulator release this check is pinned to (docs/e2e.md).
SIM_MODULE=github.com/llm-d/llm-d-inference-sim
SIM_VERSION=v0.10.2
SIM_BIN=$root/.cache/bin/llm-d-inference-sim

command -v go >/dev/null || die "Go is not installed (need go >= 1.26)"
command -v python3 >/dev/null || die "python3 is not installed"
command -v curl >/dev/null || die "curl is not installed"
case " ${GOFLAGS:-} " in *nomsgpack*) ;; *) export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=nomsgpack" ;; esac

base=${PDR_E2E_PORT_BASE:-18300}
http_port=$base
zmq_port=$((base + 1))
api=http://127.0.0.1:$http_port
model=e2e-model
run=$(mktemp -d "${TMPDIR:-/tmp}/pdrouter-e2e.XXXXXX")

pids=()
started_kafka=""
cleanup() {
  local rc=$? p
  # The emulators first, the router last (reverse start order).
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
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

# sim_version prints the module version the binary was built from.
sim_version() { go version -m "$SIM_BIN" 2>/dev/null | awk '$1 == "mod" && $2 == "'"$SIM_MODULE"'" {print $3}'; }

step "the emulator $SIM_MODULE@$SIM_VERSION"
if [ "$(sim_version)" != "$SIM_VERSION" ]; then
  # The emulator is pure Go (its ZMQ is go-zeromq/zmq4), so it builds without
  # cgo or libzmq. `go install module@version` is tried first; some module
  # proxies refuse the module's version list, which go install reads for
  # deprecation notices, so the fallback builds the same pinned version as a
  # dependency of a throwaway module (same build list: the emulator's go.mod).
  mkdir -p "$root/.cache/bin"
  if ! GOFLAGS= CGO_ENABLED=0 GOBIN="$root/.cache/bin" go install "$SIM_MODULE/cmd/llm-d-inference-sim@$SIM_VERSION" 2>"$run/sim-install.log"; then
    cat "$run/sim-install.log"
    echo "go install failed; building the same version through a throwaway module"
    mod=$root/.cache/e2e-simmod
    rm -rf "$mod" && mkdir -p "$mod"
    (cd "$mod" && GOFLAGS= go mod init e2e.invalid/simbuild >/dev/null 2>&1 &&
      GOFLAGS= go get "$SIM_MODULE/cmd/llm-d-inference-sim@$SIM_VERSION" &&
      GOFLAGS= CGO_ENABLED=0 go build -trimpath -o "$SIM_BIN" "$SIM_MODULE/cmd/llm-d-inference-sim") ||
      die "could not build $SIM_MODULE@$SIM_VERSION"
  fi
fi
got=$(sim_version)
[ "$got" = "$SIM_VERSION" ] || die "the emulator binary is $got, want $SIM_VERSION"
echo "emulator: $SIM_MODULE $got ($SIM_BIN)"

step "Python client (.cache/venv), pdrouter build"
[ -x .cache/venv/bin/python ] || python3 -m venv .cache/venv
.cache/venv/bin/pip install -q --disable-pip-version-check "$(grep -E '^openai==' tests/python/requirements.txt)"
make -s build >/dev/null
pdr=$root/bin/pdrouter

if [ -z "${PDR_TEST_BROKERS:-}" ]; then
  step "a real Kafka broker (scripts/kafka-local.sh)"
  export PDR_KAFKA_PORT=${PDR_E2E_KAFKA_PORT:-39292}
  export PDR_KAFKA_CONTROLLER_PORT=$((PDR_KAFKA_PORT + 1))
  export PDR_KAFKA_DIR=$root/.cache/e2e-kafka
  ./scripts/kafka-local.sh install
  ./scripts/kafka-local.sh wipe >/dev/null 2>&1 || true
  started_kafka=yes
  ./scripts/kafka-local.sh start
  eval "export $(./scripts/kafka-local.sh env)"
fi
# Topics of their own, so that a shared broker's earlier runs are not read.
export PDR_BROKERS=$PDR_TEST_BROKERS PDR_TOPIC_PREFIX="e2e-$(date +%s)-$$."
echo "brokers $PDR_BROKERS, topic prefix $PDR_TOPIC_PREFIX"

step "pdrouter migrate; pdrouter serve --ingest"
"$pdr" migrate --replication-factor 1 --min-insync-replicas 1 --partitions kv-events=2 >"$run/migrate.log" 2>&1 || { cat "$run/migrate.log"; die "pdrouter migrate"; }
# A prompt whose uncached part is under 64 tokens, and under 70% of it, is
# prefilled on its decode worker; the others on a prefill worker: the first
# turn of a conversation goes remote, a follow-up whose prefix is cached local.
"$pdr" serve --ingest --http-addr "127.0.0.1:$http_port" --data-dir "$run/data" \
  --bind "tcp://127.0.0.1:$zmq_port" --scrape-interval 1s \
  --router-conditional-disagg \
  --router-conditional-disagg-config '{"policy":"isl_bounding","eff_isl_threshold":64,"eff_isl_ratio_threshold":0.7}' \
  >"$run/pdrouter.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do
  curl -fsS "$api/readyz" >/dev/null 2>&1 && break
  kill -0 "${pids[-1]}" 2>/dev/null || die "pdrouter serve exited"
  sleep 0.5
done
curl -fsS "$api/readyz" >/dev/null || die "pdrouter serve not ready after 60 s"

step "2 prefill + 2 decode emulators"
workers=(prefill-1 prefill-2 decode-1 decode-2)
port=$((base + 2))
declare -A wport
for w in "${workers[@]}"; do
  wport[$w]=$port
  # POD_IP only names the worker in its event topic (kv@<POD_IP>@<model>):
  # every emulator dials the one SUB socket ingest binds.
  POD_IP=$w "$SIM_BIN" --model "$model" --port "$port" --force-dummy-tokenizer \
    --enable-kvcache --use-vllm-map-event-format --kv-cache-size 2048 --block-size 16 \
    --zmq-endpoint "tcp://127.0.0.1:$zmq_port" --max-model-len 8192 --max-num-seqs 16 \
    --prefill-overhead 5ms --prefill-time-per-token 100us --inter-token-latency 2ms \
    --kv-cache-transfer-time-per-token 20us --seed 7 >"$run/$w.log" 2>&1 &
  pids+=($!)
  port=$((port + 1))
done
for w in "${workers[@]}"; do
  for _ in $(seq 1 60); do curl -fsS "http://127.0.0.1:${wport[$w]}/health" >/dev/null 2>&1 && break; sleep 0.5; done
  curl -fsS "http://127.0.0.1:${wport[$w]}/health" >/dev/null || die "emulator $w did not come up"
done

step "registering the workers (POST /v1/workers)"
for w in "${workers[@]}"; do
  u=http://127.0.0.1:${wport[$w]}
  body=$(printf '{"worker_id":"%s","pool":"%s","model":"%s","block_size":16,"engine":"vllm","total_kv_blocks":2048,"max_num_batched_tokens":8192,"http_url":"%s","kv_events_topic":"kv@%s@%s","metrics_url":"%s/metrics"}' \
    "$w" "${w%%-*}" "$model" "$u" "$w" "$model" "$u")
  code=$(curl -sS -o "$run/register-$w.json" -w '%{http_code}' "$api/v1/workers" -H 'Content-Type: application/json' -d "$body")
  [ "$code" = 202 ] || { cat "$run/register-$w.json"; die "registering $w: HTTP $code"; }
done
for _ in $(seq 1 60); do
  n=$(curl -fsS "$api/v1/workers" | .cache/venv/bin/python -c 'import json,sys; d=json.load(sys.stdin); d=d.get("workers", d) if isinstance(d, dict) else d; print(len(d))' 2>/dev/null || echo 0)
  [ "$n" = 4 ] && break
  sleep 0.5
done
[ "$n" = 4 ] || die "the router lists $n workers, not 4"

step "the workload, through the front door ($api/v1)"
emulators=""
for w in "${workers[@]}"; do emulators+="$w=http://127.0.0.1:${wport[$w]},"; done
.cache/venv/bin/python scripts/e2e_workload.py --api "$api" --model "$model" \
  --engines "${emulators%,}" --ids "$run/decision-ids.txt" | tee "$run/workload.out"
[ "${PIPESTATUS[0]}" = 0 ] || die "the workload's checks"

step "outcomes joined to decisions (pdrouter export decisions --check-outcomes)"
"$pdr" export decisions --check-outcomes "$run/decision-ids.txt" --check-outcomes-wait 30s 2>"$run/export.log" ||
  die "outcomes missing"

step "pdrouter /metrics: the emulators' KV events and scrapes"
curl -fsS "$api/metrics" >"$run/metrics.txt"
.cache/venv/bin/python scripts/e2e_workload.py --check-metrics "$run/metrics.txt" --workers "$(IFS=,; echo "${workers[*]}")" ||
  die "pdrouter /metrics"

step "PASS: pdrouter in front of $SIM_MODULE $SIM_VERSION"
