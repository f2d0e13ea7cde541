package door

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// Door serves the OpenAI-compatible endpoints. Build it with New and Mount
// its routes.
type Door struct {
	deps     Deps
	cfg      config
	metrics  *metrics
	up       *upstream
	cache    *tokenCache
	inFlight atomic.Int64
	health   healthReports
}

// New builds a Door.
func New(deps Deps, opts ...Option) (*Door, error) {
	if deps.Decider == nil || deps.Fleet == nil || deps.Outcomes == nil {
		return nil, errors.New("door: Decider, Fleet and Outcomes are required")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxInFlight < 1 || cfg.maxBodyBytes < 1024 || cfg.maxMessages < 1 || cfg.maxPromptTokens < 1 ||
		cfg.maxLineBytes < 1024 || cfg.maxRespBytes < 1024 || cfg.maxHeaderBytes < 1024 || cfg.connectTimeout <= 0 || cfg.firstByte <= 0 ||
		cfg.total <= 0 || cfg.retryBudget < 0 || cfg.cacheTokens < 0 {
		return nil, fmt.Errorf("door: limits out of range (max in flight ≥ 1, body, line, response and headers ≥ 1024 bytes, messages and prompt tokens ≥ 1, timeouts > 0, retry budget and cache ≥ 0)")
	}
	if cfg.newID == nil {
		var n atomic.Uint64
		start := strconv.FormatInt(time.Now().UnixNano(), 36)
		cfg.newID = func() string { return "door-" + start + "-" + strconv.FormatUint(n.Add(1), 10) }
	}
	if cfg.registerer == nil {
		cfg.registerer = prometheus.NewRegistry()
	}
	d := &Door{deps: deps, cfg: cfg, metrics: newMetrics(cfg.registerer), cache: newTokenCache(cfg.cacheTokens)}
	d.up = newUpstream(&d.cfg, d.metrics)
	return d, nil
}

// Mount adds POST /completions, POST /chat/completions and GET /models to
// r, which the API gives as its /v1 group behind its authentication.
func (d *Door) Mount(r gin.IRoutes) {
	r.POST("/completions", d.handle(completions))
	r.POST("/chat/completions", d.handle(chat))
	r.GET("/models", d.models)
}

// models answers GET /v1/models from the registered workers.
func (d *Door) models(c *gin.Context) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	names := d.deps.Fleet.Models()
	sort.Strings(names)
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: make([]model, 0, len(names))}
	for _, n := range names {
		out.Data = append(out.Data, model{ID: n, Object: "model", OwnedBy: "pdrouter"})
	}
	c.JSON(200, out)
}
