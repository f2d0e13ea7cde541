package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// Registrations name the endpoints ingest dials and the URLs it fetches,
// and anyone who can register a worker (or write the workers topic) would
// otherwise make ingest connect wherever they like: the cloud metadata
// service, an admin port on localhost's neighbours, the public internet.
// The allow-list bounds that to where engines run. It is checked on the
// address actually connected to, after name resolution (a dialer Control
// hook for scrapes; a resolved, checked address substituted for the name
// for ZMQ), so a name that resolves to an allowed address when checked and
// to another when dialed cannot get around it.

// DefaultEngineAllow is the default of --engine-allow: loopback and the
// private ranges (RFC 1918, IPv6 unique local). Link-local, which holds the
// cloud metadata service (169.254.169.254), and public addresses are out.
const DefaultEngineAllow = "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"

// ErrNotAllowed marks an endpoint outside the allow-list.
var ErrNotAllowed = errors.New("not allowed by --engine-allow")

// AllowList is the parsed --engine-allow: "*" (everything), or addresses,
// CIDR prefixes and host names. A host name allows what it resolves to;
// "ipc" allows ipc:// endpoints (a path on this machine). inproc://
// endpoints, in this process, are always allowed.
type AllowList struct {
	all   bool
	ipc   bool
	nets  []netip.Prefix
	hosts map[string]bool
}

// ParseAllowList parses a comma-separated list; "" is the default.
func ParseAllowList(s string) (*AllowList, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultEngineAllow
	}
	a := &AllowList{hosts: map[string]bool{}}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			continue
		case e == "*":
			a.all = true
		case e == "ipc":
			a.ipc = true
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("--engine-allow %q: %w", e, err)
			}
			a.nets = append(a.nets, p.Masked())
		default:
			if ip, err := netip.ParseAddr(e); err == nil {
				a.nets = append(a.nets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			if !validHostName(e) {
				return nil, fmt.Errorf("--engine-allow %q: not an address, a CIDR prefix, a host name, ipc or *", e)
			}
			a.hosts[strings.ToLower(e)] = true
		}
	}
	return a, nil
}

func validHostName(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// String is the list as given to ParseAllowList, for logs.
func (a *AllowList) String() string {
	if a.all {
		return "*"
	}
	var parts []string
	for _, p := range a.nets {
		parts = append(parts, p.String())
	}
	for h := range a.hosts {
		parts = append(parts, h)
	}
	if a.ipc {
		parts = append(parts, "ipc")
	}
	return strings.Join(parts, ",")
}

// allowed reports whether ingest may connect to ip, reached through the
// name host ("" when the endpoint named the address itself).
func (a *AllowList) allowed(host string, ip netip.Addr) bool {
	if a.all || (host != "" && a.hosts[strings.ToLower(host)]) {
		return true
	}
	ip = ip.Unmap()
	for _, p := range a.nets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// resolve checks a ZMQ endpoint and returns what to dial instead: for
// tcp://name:port, tcp://address:port with an address the name resolves to
// now, once every address it resolves to is allowed (so the connection goes
// to the address that was checked). Other schemes come back unchanged when
// allowed.
func (a *AllowList) resolve(ctx context.Context, endpoint string) (string, error) {
	switch {
	case strings.HasPrefix(endpoint, "inproc://"):
		return endpoint, nil
	case strings.HasPrefix(endpoint, "ipc://"):
		if a.all || a.ipc {
			return endpoint, nil
		}
		return "", fmt.Errorf("%s: ipc endpoints are %w", endpoint, ErrNotAllowed)
	case !strings.HasPrefix(endpoint, "tcp://"):
		return "", fmt.Errorf("%s: %w", endpoint, ErrNotAllowed)
	}
	host, port, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", endpoint, err)
	}
	ips, err := a.lookup(ctx, host)
	if err != nil {
		return "", fmt.Errorf("%s: %w", endpoint, err)
	}
	return "tcp://" + net.JoinHostPort(ips[0].Unmap().String(), port), nil
}

// lookup resolves host and returns its addresses if ingest may connect to
// every one of them.
func (a *AllowList) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	name := host
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		name, ips = "", []netip.Addr{ip}
	} else {
		ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("%s resolves to no address", host)
		}
	}
	for _, ip := range ips {
		if !a.allowed(name, ip) {
			if name != "" {
				return nil, fmt.Errorf("%s resolves to %s, %w", host, ip, ErrNotAllowed)
			}
			return nil, fmt.Errorf("%s is %w", ip, ErrNotAllowed)
		}
	}
	return ips, nil
}

// dialer returns a dialer that connects to address (host:port) only if the
// address it actually connects to is allowed: the check runs in Control,
// on the socket's resolved peer address, just before connect(2).
func (a *AllowList) dialer(host string, d net.Dialer) *net.Dialer {
	d.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("dial %s: %w", address, err)
		}
		if !a.allowed(host, ap.Addr()) {
			if host != "" && host != ap.Addr().String() {
				return fmt.Errorf("%s (%s) is %w", host, ap.Addr(), ErrNotAllowed)
			}
			return fmt.Errorf("%s is %w", ap.Addr(), ErrNotAllowed)
		}
		return nil
	}
	return &d
}

// DialContext is a net.Dialer's DialContext restricted to the allow-list,
// for an http.Transport.
func (a *AllowList) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err == nil {
		host = ""
	}
	return a.dialer(host, net.Dialer{}).DialContext(ctx, network, address)
}

// allowURL checks a metrics URL before it is fetched: http or https, to a
// host whose every address is allowed. The client's dialer checks the
// address again when it connects (newScrapeClient).
func (ing *Ingest) allowURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s: scheme %q is %w", raw, u.Scheme, ErrNotAllowed)
	}
	_, err = ing.allow.lookup(ctx, u.Hostname())
	return err
}

// newScrapeClient is the default client for engines' /metrics: it connects
// only to allowed addresses, ignores proxy settings (a proxy would be the
// address checked), and does not follow redirects (a 3xx is a bad answer,
// not a way to reach another URL).
func newScrapeClient(a *AllowList) *http.Client {
	tr := &http.Transport{
		DialContext:           a.DialContext,
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// allowReplayer applies the allow-list to replay endpoints.
type allowReplayer struct {
	ing   *Ingest
	inner Replayer
}

func (r allowReplayer) Replay(ctx context.Context, endpoint string, from uint64, timeout time.Duration, fn func(Message) bool) error {
	ep, err := r.ing.allow.resolve(ctx, endpoint)
	if err != nil {
		if errors.Is(err, ErrNotAllowed) {
			r.ing.metrics.Rejects.Inc(rejects.ZMQDial, rejectNotAllowed)
			r.ing.refusedOnce("", "replay endpoint "+endpoint, err)
		}
		return err
	}
	return r.inner.Replay(ctx, ep, from, timeout, fn)
}

// maxRefusalNotes bounds the refusals remembered for logging once.
const maxRefusalNotes = 4096

// refusedOnce logs a refused endpoint (logOnce).
func (ing *Ingest) refusedOnce(worker, what string, err error) {
	ing.logOnce(worker+"\x00"+what, "refusing to connect to an engine endpoint outside --engine-allow", "worker", worker, "endpoint", what, "err", err)
}

// logOnce logs msg at Warn the first time key is seen and at Debug after,
// so a registration naming a forbidden address, or a peer sending for an
// unknown worker, is reported without a line per retry or message. The
// keys remembered are bounded (past the bound, everything is Debug).
func (ing *Ingest) logOnce(key, msg string, args ...any) {
	ing.mu.Lock()
	seen := ing.refusals[key] || len(ing.refusals) >= maxRefusalNotes
	if !seen {
		ing.refusals[key] = true
	}
	ing.mu.Unlock()
	level := slog.LevelWarn
	if seen {
		level = slog.LevelDebug
	}
	ing.log.Log(context.Background(), level, msg, args...)
}
