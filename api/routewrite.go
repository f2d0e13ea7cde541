package api

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gin-gonic/gin"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/jsonstr"
	"github.com/pdrouter/pdrouter/replay"
)

// The 200 body of POST /v1/route, written by hand.
//
// Why: encoding/json spent ~4% of the decision path's CPU on this small
// body, most of it on the watermark (a map of maps, whose keys it sorts by
// reflection on every response). The watermark is the same for every
// decision made between two applied chunks of the log, so its JSON is
// rendered once per watermark (watermarkJSON) and the other fields are
// appended directly. The bytes are exactly encoding/json's (field order,
// string escaping with HTML-safe \u003c, \u003e and \u0026, float
// format); TestRouteJSONMatchesEncodingJSON compares both on random
// responses. A response the fast path cannot write exactly (the explain
// table, a float that is NaN or infinite, which encoding/json rejects) goes
// through gin's c.JSON as before.

// writeRoute answers 200 with r.
func (s *Server) writeRoute(c *gin.Context, r *routeResponse, wm *pb.Watermark) {
	buf := s.routeBuf()
	defer s.routeBufs.Put(buf)
	if b, ok := appendRouteJSON((*buf)[:0], r, s.watermarkJSON(wm)); ok {
		c.Data(http.StatusOK, "application/json; charset=utf-8", b)
		*buf = b // keep what it grew to
		return
	}
	if r.Watermark == nil {
		r.Watermark = replay.WatermarkMap(wm)
	}
	c.JSON(http.StatusOK, r)
}

// routeBuf is a pooled response buffer; c.Data copies it to the
// connection, so it goes back to the pool when the handler returns.
func (s *Server) routeBuf() *[]byte {
	if p, ok := s.routeBufs.Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, 0, 1024)
	return &b
}

// renderedWatermark is the JSON of one watermark, by identity: state
// watermarks are immutable once published (statestore), so the pointer
// names the content.
type renderedWatermark struct {
	wm   *pb.Watermark
	json []byte
}

// watermarkJSON returns encoding/json's rendering of replay.WatermarkMap(wm),
// from a one-entry cache keyed by the watermark's pointer.
func (s *Server) watermarkJSON(wm *pb.Watermark) []byte {
	if r := s.lastWatermark.Load(); r != nil && r.wm == wm {
		return r.json
	}
	b, err := json.Marshal(replay.WatermarkMap(wm))
	if err != nil {
		return nil // unreachable: strings and integers only
	}
	s.lastWatermark.Store(&renderedWatermark{wm: wm, json: b})
	return b
}

// routeJSON holds the fast path's state in the Server.
type routeJSON struct {
	routeBufs     sync.Pool // *[]byte
	lastWatermark atomic.Pointer[renderedWatermark]
}

// appendRouteJSON appends r as encoding/json would write it, with wm as the
// watermark's JSON. ok is false when it cannot write r exactly.
func appendRouteJSON(b []byte, r *routeResponse, wm []byte) (_ []byte, ok bool) {
	if len(r.Candidates) > 0 || wm == nil || !finite(r.EffectiveISLRatio) || !finite(r.Distance) {
		return b, false
	}
	b = append(b, `{"request_id":`...)
	b = appendJSONString(b, r.RequestID)
	b = append(b, `,"decision_id":`...)
	b = appendJSONString(b, r.DecisionID)
	b = append(b, `,"mode":`...)
	b = appendJSONString(b, r.Mode)
	b = append(b, `,"decode_worker":`...)
	b = appendJSONString(b, r.DecodeWorker)
	b = append(b, `,"prefill_worker":`...)
	if r.PrefillWorker == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *r.PrefillWorker)
	}
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, r.Reason)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, r.Policy)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendUint(b, uint64(r.PromptTokens), 10)
	b = append(b, `,"cached_tokens":`...)
	b = strconv.AppendUint(b, uint64(r.CachedTokens), 10)
	b = append(b, `,"effective_isl":`...)
	b = strconv.AppendUint(b, uint64(r.EffectiveISL), 10)
	b = append(b, `,"effective_isl_ratio":`...)
	b = appendJSONFloat(b, r.EffectiveISLRatio)
	b = append(b, `,"config_hash":`...)
	b = appendJSONString(b, r.ConfigHash)
	b = append(b, `,"watermark":`...)
	b = append(b, wm...)
	b = append(b, `,"decided_by":`...)
	b = appendJSONString(b, r.DecidedBy)
	b = append(b, `,"distance":`...)
	b = appendJSONFloat(b, r.Distance)
	if r.Idempotent {
		b = append(b, `,"idempotent_replay":true`...)
	}
	return append(b, '}'), true
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// appendJSONFloat writes a finite float64 in encoding/json's format: the
// shortest decimal that reads back as f, in plain notation, or in
// exponent notation below 1e-6 and from 1e21 on, with the exponent's
// leading zero dropped (1e-07 is written 1e-7).
func appendJSONFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		start := len(b)
		b = strconv.AppendFloat(b, f, 'e', -1, 64)
		// e-07 → e-7 (the exponent has two digits at least).
		if n := len(b) - start; n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
		return b
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// appendJSONString writes s as encoding/json does by default
// (jsonstr.EncodingJSON).
func appendJSONString(b []byte, s string) []byte { return jsonstr.Append(b, s, jsonstr.EncodingJSON) }
