package ingest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

func TestAllowListDefault(t *testing.T) {
	a, err := ParseAllowList("")
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "172.20.0.5": true, "192.168.1.1": true, "fd12::1": true,
		"169.254.169.254": false, "::ffff:169.254.169.254": false, "fe80::1": false, "8.8.8.8": false,
		"2001:4860:4860::8888": false, "0.0.0.0": false, "::": false, "172.32.0.1": false, "100.64.0.1": false,
	} {
		if got := a.allowed("", netip.MustParseAddr(ip)); got != want {
			t.Errorf("%s: allowed %v, want %v", ip, got, want)
		}
	}
	all, _ := ParseAllowList("*")
	if !all.allowed("", netip.MustParseAddr("169.254.169.254")) {
		t.Error("* must allow everything")
	}
	named, err := ParseAllowList("engine.internal, 203.0.113.7, 198.51.100.0/24")
	if err != nil {
		t.Fatal(err)
	}
	if !named.allowed("Engine.Internal", netip.MustParseAddr("8.8.8.8")) || !named.allowed("", netip.MustParseAddr("203.0.113.7")) ||
		!named.allowed("", netip.MustParseAddr("198.51.100.9")) || named.allowed("other", netip.MustParseAddr("127.0.0.1")) {
		t.Error("listed names, addresses and prefixes allow exactly themselves")
	}
	for _, bad := range []string{"10.0.0.0/33", "a b", "http://x"} {
		if _, err := ParseAllowList(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestAllowListDialChecksConnectedAddress: the check runs on the address
// the socket connects to, so a name ("localhost") is judged by what it
// resolves to when dialed, not by its spelling.
func TestAllowListDialChecksConnectedAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	private, _ := ParseAllowList("10.0.0.0/8")
	if _, err := private.DialContext(context.Background(), "tcp", "localhost:"+port); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("dial localhost with only 10/8 allowed: %v, want ErrNotAllowed", err)
	}
	if _, err := private.resolve(context.Background(), "tcp://localhost:"+port); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("resolve tcp://localhost with only 10/8 allowed: %v, want ErrNotAllowed", err)
	}
	def, _ := ParseAllowList("")
	c, err := def.DialContext(context.Background(), "tcp", "localhost:"+port)
	if err != nil {
		t.Fatalf("dial localhost by default: %v", err)
	}
	c.Close()
	ep, err := def.resolve(context.Background(), "tcp://localhost:"+port)
	if err != nil || (ep != "tcp://127.0.0.1:"+port && ep != "tcp://[::1]:"+port) {
		t.Fatalf("resolve: %q, %v; want the checked address substituted for the name", ep, err)
	}
}

// countingListener accepts TCP connections on loopback and counts them.
func countingListener(t *testing.T) (port string, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	_, port, _ = net.SplitHostPort(l.Addr().String())
	return port, accepted
}

// TestEngineAllowRefusesDial: a registration naming 0.0.0.0 (which Linux
// connects to this machine) is outside the default allow-list: ingest
// never connects, for KV events nor for metrics, and counts the refusal.
func TestEngineAllowRefusesDial(t *testing.T) {
	zport, zmqAccepted := countingListener(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, vllmExposition)
	}))
	defer srv.Close()
	_, hport, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	reg := prometheus.NewRegistry()
	sink := &memSink{}
	ing, _ := runIngest(t, Config{ScrapeInterval: 20 * time.Millisecond, ReconnectInterval: 20 * time.Millisecond, Sources: []SourceConfig{
		{WorkerID: "evil", Endpoint: "tcp://0.0.0.0:" + zport, MetricsURL: "http://0.0.0.0:" + hport + "/metrics"},
	}}, Deps{Sink: sink, Registerer: reg})
	time.Sleep(time.Second)
	if n := zmqAccepted.Load(); n != 0 {
		t.Errorf("ingest connected %d times to tcp://0.0.0.0:%s, outside the allow-list", n, zport)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("ingest fetched http://0.0.0.0:%s/metrics %d times, outside the allow-list", hport, n)
	}
	rj := ing.Metrics().Rejects
	if rj.Value(rejects.ZMQDial, "not_allowed") < 1 || rj.Value(rejects.Scrape, "not_allowed") < 1 {
		t.Errorf("refusals counted: zmq_dial %v, scrape %v", rj.Value(rejects.ZMQDial, "not_allowed"), rj.Value(rejects.Scrape, "not_allowed"))
	}
}

// TestScrapeDoesNotFollowRedirects: a metrics URL that redirects elsewhere
// is a bad answer, not a way to make ingest fetch another URL.
func TestScrapeDoesNotFollowRedirects(t *testing.T) {
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, vllmExposition)
	}))
	defer target.Close()
	redirector := httptest.NewServer(http.RedirectHandler(target.URL+"/metrics", http.StatusFound))
	defer redirector.Close()
	sink := &memSink{}
	ing, _ := runIngest(t, Config{ScrapeInterval: 20 * time.Millisecond, Sources: []SourceConfig{
		{WorkerID: "w1", Topic: "kv@w1", MetricsURL: redirector.URL + "/metrics"},
	}}, Deps{Sink: sink, Registerer: prometheus.NewRegistry()})
	waitFor(t, 10*time.Second, "a scrape answered", func() bool { return ing.Metrics().Rejects.Value(rejects.Scrape, "bad_status") >= 1 })
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}
