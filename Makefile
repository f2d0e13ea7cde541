# pdrouter — the two set-up commands are `make run` and `make test`.
# Everything else here is for developers.

GO        ?= go
BIN       := bin/pdrouter
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
FUZZTIME  ?= 15s
BENCHTIME ?= 1s
BENCHCOUNT ?= 5
RUN_ARGS  ?= --router-conditional-disagg --sim --sim-time-scale 4
# nomsgpack leaves gin's MessagePack binding out of every build: pdrouter
# serves JSON only, and the codec library behind that binding was the largest
# third-party package to compile (the Dockerfile builds with it too).
# pebblegozstd has Pebble compress with the pure-Go zstd of klauspost/compress
# even where cgo is on (make build; make test's race build, which needs cgo),
# as the release image's CGO_ENABLED=0 build always does: every build and
# every test runs the compression code that ships, and no build compiles the
# C sources of DataDog/zstd (about 33 CPU-seconds for each configuration of
# the build that has cgo).
export GOFLAGS := $(strip $(GOFLAGS) -tags=nomsgpack,pebblegozstd)
# The Go modules: the product, the deployment checks (their own module, so
# the product does not depend on Prometheus, kustomize and Kubernetes types),
# and the Kubernetes pod watcher (its own module, so the product does not
# depend on client-go).
GO_MODULES := . deployments discovery

.PHONY: all build discovery run test test-unit e2e e2e-bench vet fmt proto bench fuzz kafka-start kafka-stop kafka-restart clean help

all: build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/pdrouter
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/pdrouter

discovery: ## build bin/pdrouter-discovery, the Kubernetes pod watcher (module discovery/)
	cd discovery && $(GO) build -trimpath -ldflags '-s -w' -o ../bin/pdrouter-discovery ./cmd/pdrouter-discovery

run: build ## the main job: pdrouter dev with a simulated 2P2D fleet under conditional disaggregation, then a report; flags in RUN_ARGS
	./$(BIN) dev $(RUN_ARGS)

test: ## install what is needed, start a real Kafka unless PDR_TEST_BROKERS is set, run every test, stop what was started
	./scripts/test.sh

e2e: ## pdrouter in front of a third-party vLLM emulator fleet (llm-d-inference-sim, pinned): route, P/D, outcomes, metrics checked (docs/e2e.md)
	./scripts/e2e.sh

e2e-bench: ## make e2e, then aiperf through pdrouter and through sglang-router (cache_aware) in front of the same emulators, side by side
	./scripts/e2e.sh --bench

test-unit: ## fast tests only: kfake, no real broker (integration subtests skip)
	set -e; for m in $(GO_MODULES); do (cd $$m && $(GO) test -count=1 ./...); done

vet: ## go vet, gofmt and go mod tidy -diff, in every Go module
	set -e; for m in $(GO_MODULES); do (cd $$m && $(GO) vet ./... && $(GO) mod tidy -diff); done
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

proto: ## regenerate events/eventspb with the pinned generators
	./scripts/gen-proto.sh

bench: ## run the Go benchmarks (BENCHCOUNT runs each) into .cache/bench.txt
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) ./... | tee .cache/bench.txt

fuzz: ## run every fuzz target for FUZZTIME each
	./scripts/fuzz.sh $(FUZZTIME)

kafka-start: ## start the local Apache Kafka broker (installs it on first use)
	./scripts/kafka-local.sh install
	./scripts/kafka-local.sh start

kafka-stop: ## stop the local Apache Kafka broker
	./scripts/kafka-local.sh stop

kafka-restart: ## restart the local broker on the same data
	./scripts/kafka-local.sh restart

clean: ## remove build output and local data (keeps the jar cache)
	rm -rf bin data .cache/kafka-run
