package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// DefaultMaxBodyBytes bounds a request body on an engine's API: 8 MiB fits a prompt
// of 131,072 token ids written as JSON numbers (at most 7 bytes each) with room to
// spare.
const DefaultMaxBodyBytes = 8 << 20

// engineServer is one live engine's HTTP face: vLLM's OpenAI-compatible API and its
// /metrics on one listener, as vLLM serves them on one port. Handlers never touch
// the fleet: they parse, hand the request to the loop (liveLoop.run) and relay what
// the loop puts in the request's tokenSink, paced as the engine produces it.
type engineServer struct {
	f           *Fleet
	eng         *Engine
	live        *liveLoop
	metrics     *MetricsServer
	model       string
	vocab       int
	maxModelLen int
	maxBody     int64
	rejects     *rejects.Counter
	log         *slog.Logger
	ids         atomic.Uint64

	srv *http.Server
	ln  net.Listener
}

// engineMaxModelLen is the context bound of an engine: the model's, and no more than
// its KV cache holds (vLLM refuses to start otherwise).
func engineMaxModelLen(h Hardware, c EngineConfig) int {
	n := c.NumBlocks * c.BlockSize
	if h.MaxModelLen > 0 {
		n = min(n, h.MaxModelLen)
	}
	return n
}

// startEngineServer listens on addr and serves engine e of fleet f.
func startEngineServer(addr string, f *Fleet, e *Engine, live *liveLoop, m *MetricsServer, maxBody int64, rj *rejects.Counter, log *slog.Logger) (*engineServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: engine %s listen %s: %w", e.cfg.ID, addr, err)
	}
	s := &engineServer{f: f, eng: e, live: live, metrics: m, model: e.cfg.Model, vocab: f.cfg.Hardware.Vocab,
		maxModelLen: engineMaxModelLen(f.cfg.Hardware, e.cfg), maxBody: maxBody, rejects: rj, log: log, ln: ln}
	s.srv = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the engine's OpenAI base URL without /v1, as its registration's http_url.
func (s *engineServer) URL() string { return "http://" + s.ln.Addr().String() }

// hostPort is the address the engine listens on.
func (s *engineServer) hostPort() (string, int) {
	a, _ := s.ln.Addr().(*net.TCPAddr)
	if a == nil {
		return "", 0
	}
	return a.IP.String(), a.Port
}

// Close stops the server; streams still open after a grace period are cut.
func (s *engineServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

func (s *engineServer) handler() http.Handler {
	mux := http.NewServeMux()
	route := func(path, method string, h http.HandlerFunc) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != method {
				s.fail(w, &apiError{status: http.StatusMethodNotAllowed, code: rejectMethodNotAllow,
					msg: fmt.Sprintf("%s wants %s", path, method)})
				return
			}
			h(w, r)
		})
	}
	route("/v1/completions", http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	route("/v1/chat/completions", http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	route("/tokenize", http.MethodPost, s.tokenize)
	route("/v1/models", http.MethodGet, s.models)
	route("/health", http.MethodGet, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("/metrics", s.metrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Not counted as a refusal: a path is not input the engine parses.
		writeAPIError(w, &apiError{status: http.StatusNotFound, code: "not_found", msg: "no route " + textcut.Truncate(r.URL.Path, 100)})
	})
	return mux
}

func (s *engineServer) limits() parseLimits {
	return parseLimits{vocab: s.vocab, maxModelLen: s.maxModelLen, model: s.model}
}

// fail counts a refusal and writes its OpenAI error body.
func (s *engineServer) fail(w http.ResponseWriter, e *apiError) {
	if e.status < 500 {
		s.rejects.Inc(rejects.SimHTTP, e.code)
	}
	writeAPIError(w, e)
}

// writeAPIError writes OpenAI's error body.
func writeAPIError(w http.ResponseWriter, e *apiError) {
	typ := "invalid_request_error"
	switch {
	case e.status == http.StatusNotFound:
		typ = "NotFoundError"
	case e.status >= 500:
		typ = "server_error"
	}
	var param *string
	if e.param != "" {
		param = &e.param
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"message": e.msg, "type": typ, "param": param, "code": e.code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the answer failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// readBody reads the body up to the limit.
func (s *engineServer) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: rejectBodyTooLarge,
			msg: fmt.Sprintf("request body is larger than %d bytes", s.maxBody)}
	case err != nil:
		return nil, badRequest(rejectInvalidJSON, "", "reading the body: %v", err)
	}
	return body, nil
}

func (s *engineServer) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": s.model, "object": "model", "created": 0, "owned_by": "pdrouter-sim", "root": s.model, "max_model_len": s.maxModelLen}}})
}

func (s *engineServer) tokenize(w http.ResponseWriter, r *http.Request) {
	body, aerr := s.readBody(w, r)
	if aerr == nil {
		var toks []uint32
		if toks, aerr = parseTokenizeRequest(body, s.limits()); aerr == nil {
			if toks == nil {
				toks = []uint32{}
			}
			writeJSON(w, http.StatusOK, map[string]any{"count": len(toks), "max_model_len": s.maxModelLen, "tokens": toks})
			return
		}
	}
	s.fail(w, aerr)
}

// generate serves a completion or chat completion.
func (s *engineServer) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	g, aerr := parseGenRequest(body, chat, s.limits())
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	id := r.Header.Get("X-Request-Id")
	if len(id) > maxRequestIDLen {
		s.fail(w, badRequest(rejectRequestIDLong, "X-Request-Id", "X-Request-Id is longer than %d bytes", maxRequestIDLen))
		return
	}
	if id == "" {
		id = s.eng.cfg.ID + "-" + strconv.FormatUint(s.ids.Add(1), 10)
	}
	x := &extReq{id: id, eng: s.eng, g: g, sink: newTokenSink(len(g.prompt))}
	ctx := r.Context()
	f, live := s.f, s.live
	if !live.run(ctx, func() { f.q.at(live.simNow(), func() { f.startExternal(x) }) }) {
		if ctx.Err() == nil {
			writeAPIError(w, &apiError{status: http.StatusServiceUnavailable, code: "unavailable", msg: errFleetStopped.Error()})
		}
		return
	}
	out := newGenWriter(w, g, id, s.model)
	sent := 0
	for {
		select {
		case <-x.sink.notify:
		case <-ctx.Done():
			// The client went away: free the engine's sequence. The loop may have
			// stopped meanwhile, which frees everything anyway.
			live.run(context.Background(), func() { f.abortExternal(x) })
			return
		case <-live.stopped:
			out.fail(errFleetStopped)
			return
		}
		toks, done := x.sink.read(sent)
		sent += len(toks)
		if g.stream && len(toks) > 0 {
			if err := out.tokens(toks, done); err != nil {
				live.run(context.Background(), func() { f.abortExternal(x) })
				return
			}
		} else if !g.stream {
			out.buffer(toks)
		}
		if done {
			kv, cached, err := x.sink.outcome()
			if err != nil {
				out.fail(err)
				return
			}
			out.end(kv, cached)
			return
		}
	}
}
