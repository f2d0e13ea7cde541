#!/usr/bin/env bash
# Regenerates events/eventspb from events/proto with pinned generators:
# protoc from grpcio-tools (PyPI) and protoc-gen-go (Go module proxy).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GRPCIO_TOOLS_VERSION=${GRPCIO_TOOLS_VERSION:-1.76.0}
PROTOC_GEN_GO_VERSION=${PROTOC_GEN_GO_VERSION:-v1.36.12}
venv=.cache/venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c "import grpc_tools" 2>/dev/null \
  && [ "$("$venv/bin/pip" show grpcio-tools 2>/dev/null | awk '/^Version/{print $2}')" = "$GRPCIO_TOOLS_VERSION" ] \
  || "$venv/bin/pip" install -q "grpcio-tools==$GRPCIO_TOOLS_VERSION"
GOBIN="$root/.cache/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
rm -f events/eventspb/*.pb.go
"$venv/bin/python" -m grpc_tools.protoc \
  --plugin=protoc-gen-go="$root/.cache/bin/protoc-gen-go" \
  -I events/proto \
  --go_out=. --go_opt=module=github.com/pdrouter/pdrouter \
  events/proto/pdrouter/events/v1/*.proto
echo "generated: $(ls events/eventspb)"
