package api

import (
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/internal/rejects"
)

// httpRefusals are the reasons of pdrouter_rejected_total{entry="http"}:
// the codes of the 4xx answers the API gives, which are fixed strings of
// this package, never input. A request timed out while its body was read is
// counted as read_timeout, whatever its answer (408, or a closed
// connection). A code missing from the list is counted as "other", so the
// label stays bounded even if a new code is forgotten here.
var httpRefusals = []string{
	"body_too_large", "headers_too_large", reasonReadTimeout, "malformed_json", "duplicate_key", "unknown_field",
	"invalid_type", "invalid_value", "missing_field", "ambiguous_prompt", "invalid_request_id", "invalid_request",
	"too_many_tokens", "unknown_model", "unsupported_media_type", "request_id_conflict", "no_route",
	"method_not_allowed", "unauthorized", "unknown_request", "unknown_worker", "unknown_decision",
	"invalid_decision_id", "too_many_workers", reasonWrongCell, reasonRecordTooLarge, reasonOther,
}

const (
	reasonReadTimeout = "read_timeout"
	reasonOther       = "other"
	// codeRequestTimeout is the code of a 408 (counted as read_timeout).
	codeRequestTimeout = "request_timeout"
)

// countRefusal counts the request's answer in pdrouter_rejected_total when
// it refused the request (a 4xx).
func (s *Server) countRefusal(c *gin.Context) {
	status := c.Writer.Status()
	// 410: the decision exists but its record left the log, which says
	// nothing about the request.
	if status < 400 || status >= 500 || status == http.StatusGone {
		return
	}
	code := c.GetString(errorCodeKey)
	switch {
	case code == codeRequestTimeout || status == http.StatusRequestTimeout:
		code = reasonReadTimeout
	case !slices.Contains(httpRefusals, code):
		code = reasonOther
	}
	s.rejects.Inc(rejects.HTTP, code)
}
