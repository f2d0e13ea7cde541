package api

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// checkHTTPURL validates a registration's http_url, the engine's
// OpenAI-compatible base URL that the door calls. Like a ZMQ endpoint, it
// must be where the router reaches the engine: a bind address (0.0.0.0,
// [::]) is refused with the fix. The base is without /v1, because the door
// calls both <base>/v1/completions and <base>/tokenize; a URL ending in /v1
// is refused rather than guessed at. Where the door may connect is bounded
// again when it dials (--engine-allow), as ingest's scrapes are.
func checkHTTPURL(field, raw string) *Error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return unprocessable("invalid_value", field, fmt.Sprintf("%s is not an http(s) base URL (http://host:port)", quoted(raw)))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return unprocessable("invalid_value", field, fmt.Sprintf("%s: give scheme, host, port and an optional path only (no user info, query or fragment)", quoted(raw)))
	}
	if p := strings.TrimSuffix(u.Path, "/"); strings.HasSuffix(p, "/v1") {
		return unprocessable("invalid_value", field, fmt.Sprintf("%s ends in /v1; give the base URL without it (the door calls <http_url>/v1/... and <http_url>/tokenize)", quoted(raw)))
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return unprocessable("invalid_value", field, fmt.Sprintf(
			"%s is the address the engine binds, not one the router can reach: give the engine's reachable host and port, e.g. http://<engine-host>:%s", quoted(raw), u.Port()))
	}
	return nil
}
