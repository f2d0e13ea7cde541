package api

import (
	"fmt"
	"net"
	"strings"
)

// checkZMQEndpoint refuses a registration's ZMQ endpoint that ingest could
// not dial. Besides the scheme, that is an engine's own bind address:
// vLLM's --kv-events-config takes "tcp://*:5557" (or 0.0.0.0, ::), which
// says where the engine listens, not where it is reached, and ingest would
// retry a dial to nowhere for as long as the worker stays registered.
//
// The check is made here and not in events.Validate: Validate also runs on
// every record read back from the log, so a registration already in the
// compacted workers topic would vanish from every replica; and such an
// endpoint corrupts no state, it only helps no one. The API is where a
// person types it, so the API is where it is explained.
func checkZMQEndpoint(field, ep string) *Error {
	if ep == "" {
		return nil
	}
	if !strings.HasPrefix(ep, "tcp://") && !strings.HasPrefix(ep, "ipc://") && !strings.HasPrefix(ep, "inproc://") {
		return unprocessable("invalid_value", field, fmt.Sprintf("%q is not a ZMQ endpoint (tcp://host:port)", ep))
	}
	hostPort, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return nil // ipc:// and inproc:// are reached where they are bound
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		host, port = hostPort, "<port>"
	}
	if ip := net.ParseIP(host); host == "*" || host == "" || (ip != nil && ip.IsUnspecified()) {
		return unprocessable("invalid_value", field, fmt.Sprintf(
			"%q is the address the engine binds, not one ingest can reach: give the engine's reachable host and port, e.g. tcp://<engine-host>:%s", ep, port))
	}
	return nil
}
