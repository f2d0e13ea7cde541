package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// EngineLoad is what one scrape says about one engine DP rank. Nil fields
// were not reported: the load schema keeps "absent" apart from zero.
type EngineLoad struct {
	DPRank  uint32
	Running *float64
	Waiting *float64
	// KvUsage is KV-cache usage in [0, 1].
	KvUsage *float64
	// BlockSize and KvTotalBlocks come from vllm:cache_config_info.
	BlockSize     *uint64
	KvTotalBlocks *uint64
	// SGLang reports tokens, not blocks.
	UsedTokens *float64
	MaxTokens  *float64
}

// The metric names each engine exposes. vLLM renamed
// gpu_cache_usage_perc to kv_cache_usage_perc (the old name is deprecated
// and later hidden), so both are read, the new one preferred. SGLang's
// gauges carry a "dp" label per attention-DP rank in newer versions; vLLM's
// carry "engine" (the engine index, i.e. the DP rank behind that server).
const (
	vllmRunning      = "vllm:num_requests_running"
	vllmWaiting      = "vllm:num_requests_waiting"
	vllmKvUsage      = "vllm:kv_cache_usage_perc"
	vllmGpuUsage     = "vllm:gpu_cache_usage_perc"
	vllmCacheConfig  = "vllm:cache_config_info"
	sglRunning       = "sglang:num_running_reqs"
	sglWaiting       = "sglang:num_queue_reqs"
	sglTokenUsage    = "sglang:token_usage"
	sglUsedTokens    = "sglang:num_used_tokens"
	sglMaxTotalToken = "sglang:max_total_num_tokens"
)

// MaxScrapeBytes bounds a /metrics body; engines expose tens of kilobytes.
const MaxScrapeBytes = 8 << 20

// ParseEngineMetrics reads Prometheus text exposition (with the Prometheus
// parser, not by hand) and returns the load of every DP rank it mentions,
// sorted by rank. Unknown metrics are ignored.
func ParseEngineMetrics(r io.Reader) ([]EngineLoad, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(r, MaxScrapeBytes))
	if err != nil {
		return nil, err
	}
	byRank := map[uint32]*EngineLoad{}
	get := func(m *dto.Metric) *EngineLoad {
		rank := uint32(0)
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "engine" || lp.GetName() == "dp" || lp.GetName() == "dp_rank" {
				if v, err := strconv.ParseUint(lp.GetValue(), 10, 32); err == nil {
					rank = uint32(v)
				}
			}
		}
		if byRank[rank] == nil {
			byRank[rank] = &EngineLoad{DPRank: rank}
		}
		return byRank[rank]
	}
	gauge := func(name string, set func(*EngineLoad, float64)) {
		for _, m := range fams[name].GetMetric() {
			v := m.GetGauge().GetValue()
			if m.GetGauge() == nil {
				v = m.GetUntyped().GetValue()
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				continue
			}
			set(get(m), v)
		}
	}
	fp := func(v float64) *float64 { return &v }
	// Older name first, so the newer one overwrites it.
	gauge(vllmGpuUsage, func(l *EngineLoad, v float64) { l.KvUsage = fp(v) })
	gauge(vllmKvUsage, func(l *EngineLoad, v float64) { l.KvUsage = fp(v) })
	gauge(vllmRunning, func(l *EngineLoad, v float64) { l.Running = fp(v) })
	gauge(vllmWaiting, func(l *EngineLoad, v float64) { l.Waiting = fp(v) })
	gauge(sglRunning, func(l *EngineLoad, v float64) { l.Running = fp(v) })
	gauge(sglWaiting, func(l *EngineLoad, v float64) { l.Waiting = fp(v) })
	gauge(sglTokenUsage, func(l *EngineLoad, v float64) { l.KvUsage = fp(v) })
	gauge(sglUsedTokens, func(l *EngineLoad, v float64) { l.UsedTokens = fp(v) })
	gauge(sglMaxTotalToken, func(l *EngineLoad, v float64) { l.MaxTokens = fp(v) })
	for _, m := range fams[vllmCacheConfig].GetMetric() {
		l := get(m)
		for _, lp := range m.GetLabel() {
			v, err := strconv.ParseUint(lp.GetValue(), 10, 64)
			if err != nil {
				continue // "None" before the profiler ran, for example
			}
			switch lp.GetName() {
			case "block_size":
				l.BlockSize = &v
			case "num_gpu_blocks":
				l.KvTotalBlocks = &v
			}
		}
	}
	out := make([]EngineLoad, 0, len(byRank))
	for _, l := range byRank {
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DPRank < out[j].DPRank })
	return out, nil
}

// Scrape fetches url and parses it, reading at most MaxScrapeBytes.
func Scrape(ctx context.Context, hc *http.Client, url string) ([]EngineLoad, error) {
	return scrape(ctx, hc, url, MaxScrapeBytes)
}

// The ways a scrape fails that are the engine's answer, not the network:
// each is a reason of pdrouter_rejected_total{entry="scrape"}.
var (
	errScrapeTooLarge  = errors.New("metrics body over the size limit")
	errScrapeStatus    = errors.New("metrics answer is not 200 OK")
	errScrapeMalformed = errors.New("metrics body is not Prometheus text")
)

// scrape fetches url and parses at most maxBytes of its body: a bigger
// body is an error (errScrapeTooLarge), never a truncated parse.
func scrape(ctx context.Context, hc *http.Client, url string, maxBytes int64) ([]EngineLoad, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// Ask for the classic text format: the parser reads exactly that.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %s: %w", url, resp.Status, errScrapeStatus)
	}
	if resp.ContentLength > maxBytes {
		return nil, fmt.Errorf("GET %s: %d bytes, over %d: %w", url, resp.ContentLength, maxBytes, errScrapeTooLarge)
	}
	body := &cappedReader{r: resp.Body, left: maxBytes}
	loads, err := ParseEngineMetrics(body)
	if body.over {
		return nil, fmt.Errorf("GET %s: over %d bytes: %w", url, maxBytes, errScrapeTooLarge)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("GET %s: %w: %w", url, errScrapeMalformed, err)
	}
	return loads, nil
}

// cappedReader reads up to left bytes and then fails, remembering that the
// source had more.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			c.over = true
			return 0, errScrapeTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
