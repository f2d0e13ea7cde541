package door

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Option configures a Door.
type Option func(*config)

type config struct {
	log        *slog.Logger
	registerer prometheus.Registerer
	now        func() time.Time
	newID      func() string
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)

	maxInFlight     int
	retryBudget     time.Duration
	maxBodyBytes    int64
	maxMessages     int
	maxPromptTokens int
	maxLineBytes    int
	maxRespBytes    int64
	maxHeaderBytes  int64
	connectTimeout  time.Duration
	firstByte       time.Duration
	total           time.Duration
	cacheTokens     int
	outcomeTimeout  time.Duration
}

// Defaults of the door's limits (the cobra flags of cmd/pdrouter use them).
const (
	DefaultMaxInFlight         = 1024
	DefaultRetryBudget         = 5 * time.Second
	DefaultMaxBodyBytes        = 16 << 20
	DefaultMaxMessages         = 4096
	DefaultMaxLineBytes        = 1 << 20
	DefaultMaxResponseBytes    = 16 << 20
	DefaultMaxHeaderBytes      = 64 << 10
	DefaultConnectTimeout      = 3 * time.Second
	DefaultFirstByteTimeout    = 2 * time.Minute
	DefaultTotalTimeout        = 30 * time.Minute
	DefaultTokenizeCacheTokens = 8 << 20
)

func defaultConfig() config {
	return config{
		log:             slog.New(slog.DiscardHandler),
		now:             time.Now,
		maxInFlight:     DefaultMaxInFlight,
		retryBudget:     DefaultRetryBudget,
		maxBodyBytes:    DefaultMaxBodyBytes,
		maxMessages:     DefaultMaxMessages,
		maxPromptTokens: 1 << 21,
		maxLineBytes:    DefaultMaxLineBytes,
		maxRespBytes:    DefaultMaxResponseBytes,
		maxHeaderBytes:  DefaultMaxHeaderBytes,
		connectTimeout:  DefaultConnectTimeout,
		firstByte:       DefaultFirstByteTimeout,
		total:           DefaultTotalTimeout,
		cacheTokens:     DefaultTokenizeCacheTokens,
		outcomeTimeout:  10 * time.Second,
	}
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithMetrics registers the door's metrics on reg. Default: a private
// registry.
func WithMetrics(reg prometheus.Registerer) Option { return func(c *config) { c.registerer = reg } }

// WithClock replaces the clock that measures latencies (TTFT, ITL, added
// latency). Decisions never read it.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithIDGenerator sets the generator of request ids, which must be new on
// every call (the API passes its own, so door requests have the API's id
// format).
func WithIDGenerator(f func() string) Option { return func(c *config) { c.newID = f } }

// WithDialer replaces how the door connects to engines: the router passes
// its --engine-allow list's dialer, so an http_url cannot make the door
// connect where engines do not run.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(c *config) { c.dial = dial }
}

// WithMaxInFlight bounds the requests the door serves at once; one more is
// answered 429 with Retry-After. Default 1024.
func WithMaxInFlight(n int) Option { return func(c *config) { c.maxInFlight = n } }

// WithRetryBudget bounds when a request whose worker failed before its
// first token is retried on another worker: only while the request is
// younger than d. 0 disables retries. Default 5 s.
func WithRetryBudget(d time.Duration) Option { return func(c *config) { c.retryBudget = d } }

// WithMaxBodyBytes caps a request body (413 above). Default 16 MiB.
func WithMaxBodyBytes(n int64) Option { return func(c *config) { c.maxBodyBytes = n } }

// WithMaxMessages caps a chat request's messages (400 above). Default 4096.
func WithMaxMessages(n int) Option { return func(c *config) { c.maxMessages = n } }

// WithMaxPromptTokens caps a prompt's token ids, given or tokenized (400
// above): the API's --max-prompt-tokens. Default 2,097,152.
func WithMaxPromptTokens(n int) Option { return func(c *config) { c.maxPromptTokens = n } }

// WithMaxUpstreamLineBytes caps one line of an engine's event stream (and
// so one chunk). Default 1 MiB.
func WithMaxUpstreamLineBytes(n int) Option { return func(c *config) { c.maxLineBytes = n } }

// WithMaxUpstreamResponseBytes caps a whole non-streamed engine answer
// (and a /tokenize answer). Default 16 MiB.
func WithMaxUpstreamResponseBytes(n int64) Option { return func(c *config) { c.maxRespBytes = n } }

// WithMaxUpstreamHeaderBytes caps the headers of an engine's answer (a few
// hundred bytes from a real engine). Default 64 KiB.
func WithMaxUpstreamHeaderBytes(n int64) Option { return func(c *config) { c.maxHeaderBytes = n } }

// WithUpstreamTimeouts bounds an engine call: the TCP connect, the wait for
// the response headers (the first byte), and the whole call. Defaults 3 s,
// 2 min, 30 min.
func WithUpstreamTimeouts(connect, firstByte, total time.Duration) Option {
	return func(c *config) { c.connectTimeout, c.firstByte, c.total = connect, firstByte, total }
}

// WithTokenizeCacheTokens bounds the tokenize cache by the token ids it
// holds, in total (4 bytes each). 0 disables it. Default 8,388,608 (32 MiB).
func WithTokenizeCacheTokens(n int) Option { return func(c *config) { c.cacheTokens = n } }
