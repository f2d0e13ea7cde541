package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"google.golang.org/protobuf/encoding/protojson"
)

var recordJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false}

// getDecision returns the stored decision record, in the Protobuf JSON
// mapping of pdrouter.events.v1.DecisionRecord (what `log tail` prints).
func (s *Server) getDecision(c *gin.Context) {
	rec, ok := s.deps.State.Decision(c.Param("id"))
	if !ok {
		fail(c, notFound("unknown_decision", "no decision "+c.Param("id")+" in this replica's state (old decisions: pdrouter log tail decisions)"))
		return
	}
	b, err := recordJSON.Marshal(rec)
	if err != nil {
		fail(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json", b)
}

// explain is answered by the replay/explain work (issue "Replay, explain,
// what-if"); until then it says so precisely, as api.md allows.
func (s *Server) explain(c *gin.Context) {
	if _, ok := s.deps.State.Decision(c.Param("id")); !ok {
		fail(c, notFound("unknown_decision", "no decision "+c.Param("id")+" in this replica's state"))
		return
	}
	fail(c, &Error{Status: http.StatusNotImplemented, Code: "not_implemented",
		Message: "replay explanation is not available in this build; GET /v1/decisions/{id} returns the full record with its candidate table and checks"})
}
