package ingest

import (
	"fmt"
	"strconv"
	"strings"
)

// OffsetEndpoint returns the endpoint of data-parallel rank `rank`, as
// engines compute it: each DP rank runs its own publisher, and rank r binds
// base_port + r. Rank 0 is the endpoint unchanged; tcp endpoints get the
// number after the last ':' plus rank; inproc endpoints get the suffix
// "_dp<rank>"; any other scheme with rank > 0 is an error (engines refuse
// it too). It applies to replay endpoints the same way.
func OffsetEndpoint(endpoint string, rank int) (string, error) {
	if rank < 0 {
		return "", fmt.Errorf("endpoint %q: negative dp rank %d", endpoint, rank)
	}
	if rank == 0 || endpoint == "" {
		return endpoint, nil
	}
	if strings.HasPrefix(endpoint, "inproc://") {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	if strings.Contains(endpoint, "tcp") {
		i := strings.LastIndexByte(endpoint, ':')
		if i < 0 {
			return "", fmt.Errorf("endpoint %q has no port to offset for dp rank %d", endpoint, rank)
		}
		port, err := strconv.Atoi(endpoint[i+1:])
		if err != nil || port < 0 {
			return "", fmt.Errorf("endpoint %q: port %q is not a number, cannot offset it for dp rank %d", endpoint, endpoint[i+1:], rank)
		}
		if port+rank > 65535 {
			return "", fmt.Errorf("endpoint %q: port %d + dp rank %d is over 65535", endpoint, port, rank)
		}
		return endpoint[:i+1] + strconv.Itoa(port+rank), nil
	}
	return "", fmt.Errorf("endpoint %q: only tcp:// and inproc:// endpoints can be offset for dp rank %d", endpoint, rank)
}

// EngineBinds reports whether an engine configured with this endpoint binds
// its PUB socket (then ingest connects to it) rather than connecting to a
// SUB that ingest binds. vLLM's rule: bind when the address has a wildcard
// ('*' or '::') or is ipc:// or inproc://.
func EngineBinds(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// checkEndpoint rejects endpoints go-zeromq cannot use, early and with the
// flag's name in the message.
func checkEndpoint(what, ep string) error {
	for _, scheme := range []string{"tcp://", "ipc://", "inproc://"} {
		if strings.HasPrefix(ep, scheme) && len(ep) > len(scheme) {
			return nil
		}
	}
	return fmt.Errorf("%s %q: want tcp://host:port, ipc://path or inproc://name", what, ep)
}
