package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// OpenAIRunConfig configures RunViaOpenAI.
type OpenAIRunConfig struct {
	// BaseURL is an OpenAI base URL, /v1 included: pdrouter's door
	// (http://127.0.0.1:8080/v1) or one engine (its http_url + "/v1").
	BaseURL string
	// Model is the model requests name.
	Model string
	// AuthToken is sent as a bearer token when set.
	AuthToken string
	// TimeScale is simulated seconds per wall second, as the fleet's: requests are
	// sent at arrival ÷ TimeScale, and latencies measured on the wall clock are
	// multiplied by it (see RunViaOpenAI).
	TimeScale float64
	SLO       SLO
	// MaxInFlight bounds the requests open at once (default 1024); a request
	// waiting for a slot is late, and its wait counts in its TTFT.
	MaxInFlight int
	// Label names the run in the report.
	Label string
}

// RunViaOpenAI replays a workload as an OpenAI client would: each request is sent at
// its scaled arrival time as a streaming POST /v1/completions whose prompt is the
// request's token ids, with max_tokens and min_tokens both its output length (so the
// length is exact, as vLLM honours min_tokens), seed the request's output seed (so
// the engines generate the tokens the workload's next turn resends, and prefix
// caching sees a conversation's history as in a routed run), X-Request-Id its id,
// and stream_options.include_usage set. TTFT and inter-token latencies are measured by
// the client, from the request's scheduled send time to each streamed chunk, and an
// answer's x-pdrouter-decision-id header is kept when present.
//
// Time: the engines run on the simulated clock, TimeScale simulated seconds per wall
// second, so a wall duration d measured by the client is d × TimeScale of simulated
// time; the report is in simulated time like RunFleet's, and comparable with it. The
// client-side figures include what the route-driven run does not see: HTTP, and
// through a door the routing, both scaled as well (at scale 10, 1 ms of real overhead
// reads as 10 ms). A request's placement is what pdrouter's door says in its
// answer's headers (x-pdrouter-mode, x-pdrouter-reason); an answer without them
// (an engine called directly, another proxy) counts as Unplaced. The fleet-side
// fields (cache hits, transfers, prefill load, queue samples) are not visible to
// a client: RunFleet fills them from its engines.
func RunViaOpenAI(ctx context.Context, cfg OpenAIRunConfig, w *Workload, client *http.Client, log *slog.Logger) (*Report, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OpenAI base URL %q: want http://host:port/v1", cfg.BaseURL)
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if cfg.SLO == (SLO{}) {
		cfg.SLO = DefaultSLO()
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1024
	}
	if cfg.Label == "" {
		cfg.Label = "openai " + cfg.BaseURL
	}
	if client == nil {
		client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.MaxInFlight}}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	endpoint := strings.TrimRight(cfg.BaseURL, "/") + "/completions"
	results := make([]*result, len(w.Requests))
	slots := make(chan struct{}, cfg.MaxInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	toSim := func(d time.Duration) simTime { return simTime(float64(d) * cfg.TimeScale) }
	for i, r := range w.Requests {
		res := &result{req: r, arrival: r.Arrival}
		results[i] = res
		due := start.Add(time.Duration(float64(r.Arrival) / cfg.TimeScale))
		if d := time.Until(due); d > 0 {
			tm := time.NewTimer(d)
			select {
			case <-ctx.Done():
			case <-tm.C:
			}
			tm.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			ob, err := streamCompletion(ctx, client, endpoint, cfg, r)
			if err != nil {
				if ctx.Err() == nil {
					res.err = err
					log.Warn("openai request failed", "request", r.ID, "err", err)
				}
				return
			}
			res.routed, res.decisionID = true, ob.decisionID
			res.dec = Decision{Mode: ob.mode, Reason: ob.reason, DecisionID: ob.decisionID}
			if ob.tokens == 0 {
				res.err = fmt.Errorf("request %s: the answer streamed no token", r.ID)
				return
			}
			res.firstToken = r.Arrival + toSim(ob.first.Sub(due))
			res.done = r.Arrival + toSim(ob.last.Sub(due))
			res.generated, res.finished = ob.tokens, true
		}()
	}
	wg.Wait()
	rep := summarizeResults(cfg.Label, cfg.SLO, results)
	log.Info("openai run finished", "wall", time.Since(start).Round(time.Millisecond), "completed", rep.Completed, "failed", rep.Failed)
	return rep, ctx.Err()
}

// streamed is what the client saw of one streamed answer: its tokens, and
// what a door's headers said of its routing.
type streamed struct {
	first, last              time.Time
	tokens                   int
	decisionID, mode, reason string
}

// The headers of pdrouter's door (door.HeaderDecisionID, HeaderMode,
// HeaderReason): the simulator is a client of the door and does not import
// it.
const (
	headerDecisionID = "X-Pdrouter-Decision-Id"
	headerMode       = "X-Pdrouter-Mode"
	headerReason     = "X-Pdrouter-Reason"
)

// maxSSELine bounds one line of an answer's stream.
const maxSSELine = 1 << 20

func streamCompletion(ctx context.Context, client *http.Client, endpoint string, cfg OpenAIRunConfig, r *Request) (*streamed, error) {
	// The seed makes the engine generate the workload's own output tokens, which
	// the conversation's next turn resends (int64 on the wire, as vLLM's seed).
	body, err := json.Marshal(map[string]any{"model": cfg.Model, "prompt": r.Tokens(), "max_tokens": r.OutputLen,
		"min_tokens": r.OutputLen, "seed": int64(r.Output), "stream": true, "stream_options": map[string]any{"include_usage": true}})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", r.ID)
	if cfg.AuthToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.AuthToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusBadRequest && errorCode(msg) == rejectPromptTooLong {
			// What the offline fleet counts as over the context, so that the two
			// reports agree on it.
			return nil, fmt.Errorf("%s answered %d: %w: %s", endpoint, resp.StatusCode, errOverContext, bytes.TrimSpace(msg))
		}
		return nil, fmt.Errorf("%s answered %d: %s", endpoint, resp.StatusCode, bytes.TrimSpace(msg))
	}
	out := &streamed{decisionID: resp.Header.Get(headerDecisionID), reason: resp.Header.Get(headerReason)}
	// Only the modes the report knows: anything else counts as unplaced.
	if m := resp.Header.Get(headerMode); m == ModeLocal || m == ModeRemote {
		out.mode = m
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSELine)
	chunks, usageTokens := 0, -1
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue // blank separators, comments, event names
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			if usageTokens >= 0 {
				out.tokens = usageTokens
			} else {
				out.tokens = chunks
			}
			return out, nil
		}
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return nil, fmt.Errorf("stream chunk: %w", err)
		}
		if c.Error != nil {
			return nil, fmt.Errorf("stream error: %s", c.Error.Message)
		}
		if c.Usage != nil {
			usageTokens = c.Usage.CompletionTokens
		}
		if len(c.Choices) > 0 && c.Choices[0].Text != "" {
			now := time.Now()
			if chunks == 0 {
				out.first = now
			}
			out.last = now
			chunks++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("the stream ended without [DONE]")
}

// errorCode is the code of an OpenAI error body ({"error": {"code": …}}), or "" when
// the body is not one (a truncated or foreign body).
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	c, _ := e.Error.Code.(string)
	return c
}
