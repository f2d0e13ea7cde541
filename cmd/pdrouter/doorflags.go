package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/door"
	"github.com/pdrouter/pdrouter/ingest"
)

// doorFlags configure the OpenAI front door (package door) that serve and
// dev mount on --http-addr.
type doorFlags struct {
	enabled        bool
	maxInFlight    int
	retryBudget    time.Duration
	maxBodyBytes   int64
	maxMessages    int
	maxLineBytes   int
	maxRespBytes   int64
	maxHeaderBytes int64
	connectTimeout time.Duration
	firstByte      time.Duration
	total          time.Duration
	cacheTokens    int
	engineAllow    string
}

func (f *doorFlags) bindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&f.enabled, "door", true, "serve the OpenAI-compatible front door on --http-addr: POST /v1/completions, POST /v1/chat/completions, GET /v1/models (an OpenAI client's base URL is http://<http-addr>/v1)")
	fs.IntVar(&f.maxInFlight, "door-max-in-flight", door.DefaultMaxInFlight, "most OpenAI requests served at once; one more is answered 429 with Retry-After")
	fs.DurationVar(&f.retryBudget, "door-retry-budget", door.DefaultRetryBudget, "a request whose worker fails before its first token is retried once on another worker while it is younger than this (0: never)")
	fs.Int64Var(&f.maxBodyBytes, "door-max-body-bytes", door.DefaultMaxBodyBytes, "largest OpenAI request body (413 above)")
	fs.IntVar(&f.maxMessages, "door-max-messages", door.DefaultMaxMessages, "most messages in a chat completion request (400 above); prompt token ids are bounded by --max-prompt-tokens")
	fs.IntVar(&f.maxLineBytes, "door-max-upstream-line-bytes", door.DefaultMaxLineBytes, "longest line (one chunk) of an engine's event stream; a longer one ends the stream with an error")
	fs.Int64Var(&f.maxRespBytes, "door-max-upstream-response-bytes", door.DefaultMaxResponseBytes, "largest whole (non-streamed) engine answer, and /tokenize answer")
	fs.Int64Var(&f.maxHeaderBytes, "door-max-upstream-header-bytes", door.DefaultMaxHeaderBytes, "largest headers of an engine's answer; larger ones fail the call, which is retried on another worker")
	fs.DurationVar(&f.connectTimeout, "door-upstream-connect-timeout", door.DefaultConnectTimeout, "longest connect to an engine")
	fs.DurationVar(&f.firstByte, "door-upstream-first-byte-timeout", door.DefaultFirstByteTimeout, "longest wait for an engine's answer headers, and for a stream's first event")
	fs.DurationVar(&f.total, "door-upstream-timeout", door.DefaultTotalTimeout, "longest engine call, whole stream included")
	fs.IntVar(&f.cacheTokens, "door-tokenize-cache-tokens", door.DefaultTokenizeCacheTokens, "token ids the tokenize cache holds in total, 4 bytes each (0: no cache)")
	fs.StringVar(&f.engineAllow, "door-engine-allow", ingest.DefaultEngineAllow, "where the door may connect (registrations' http_url): as ingest's --engine-allow, checked on every address connected to")
}

func (f *doorFlags) validate() error {
	if f.maxInFlight < 1 || f.maxBodyBytes < 1024 || f.maxMessages < 1 || f.maxLineBytes < 1024 || f.maxRespBytes < 1024 || f.maxHeaderBytes < 1024 {
		return errors.New("--door-max-in-flight, --door-max-messages ≥ 1; --door-max-body-bytes, --door-max-upstream-line-bytes, --door-max-upstream-response-bytes, --door-max-upstream-header-bytes ≥ 1024")
	}
	if f.connectTimeout <= 0 || f.firstByte <= 0 || f.total <= 0 || f.retryBudget < 0 || f.cacheTokens < 0 {
		return errors.New("--door-upstream-connect-timeout, --door-upstream-first-byte-timeout and --door-upstream-timeout > 0; --door-retry-budget and --door-tokenize-cache-tokens ≥ 0")
	}
	return nil
}

// option is the api option that serves the door, or nil when disabled.
func (f *doorFlags) option() (api.Option, error) {
	if !f.enabled {
		return nil, nil
	}
	allow, err := ingest.ParseAllowList(f.engineAllow)
	if err != nil {
		return nil, fmt.Errorf("--door-engine-allow: %w", err)
	}
	return api.WithDoor(
		door.WithDialer(allow.DialContext), door.WithMaxInFlight(f.maxInFlight), door.WithRetryBudget(f.retryBudget),
		door.WithMaxBodyBytes(f.maxBodyBytes), door.WithMaxMessages(f.maxMessages),
		door.WithMaxUpstreamLineBytes(f.maxLineBytes), door.WithMaxUpstreamResponseBytes(f.maxRespBytes), door.WithMaxUpstreamHeaderBytes(f.maxHeaderBytes),
		door.WithUpstreamTimeouts(f.connectTimeout, f.firstByte, f.total), door.WithTokenizeCacheTokens(f.cacheTokens),
	), nil
}
