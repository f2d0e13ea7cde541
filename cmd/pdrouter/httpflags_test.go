package main

import (
	"testing"
	"time"
)

// TestHTTPFlagsReachTheServer: the HTTP bounds have safe defaults, take
// their PDR_ variables, and shape the http.Server (whose header bound is a
// backstop above the API's own).
func TestHTTPFlagsReachTheServer(t *testing.T) {
	rf := parseRouterFlags(t, nil)
	if err := rf.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	hs := rf.httpServer(nil)
	if rf.httpReadTimeout != 30*time.Second || hs.ReadHeaderTimeout != 10*time.Second || hs.IdleTimeout != 2*time.Minute ||
		rf.httpMaxHeaderBytes != 64<<10 || hs.MaxHeaderBytes != 128<<10 || rf.maxAfterPartitions != 1024 {
		t.Fatalf("defaults: read %s, header %s, idle %s, max header %d (server %d), after %d",
			rf.httpReadTimeout, hs.ReadHeaderTimeout, hs.IdleTimeout, rf.httpMaxHeaderBytes, hs.MaxHeaderBytes, rf.maxAfterPartitions)
	}
	rf = parseRouterFlags(t, map[string]string{"PDR_HTTP_READ_HEADER_TIMEOUT": "3s", "PDR_HTTP_MAX_HEADER_BYTES": "8192"}, "--http-idle-timeout", "9s")
	if hs := rf.httpServer(nil); hs.ReadHeaderTimeout != 3*time.Second || hs.MaxHeaderBytes != 16384 || hs.IdleTimeout != 9*time.Second {
		t.Fatalf("from env and flags: %+v", hs)
	}
	for _, bad := range [][]string{{"--http-read-timeout", "0s"}, {"--http-max-header-bytes", "100"}, {"--max-after-partitions", "0"}} {
		if err := parseRouterFlags(t, nil, bad...).validate(); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}
