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
	sd, ok := s.deps.State.Decision(c.Param("id"))
	if !ok {
		fail(c, notFound("unknown_decision", "no decision "+c.Param("id")+" in this replica's state (old decisions: pdrouter log tail decisions)"))
		return
	}
	rec, err := s.wholeDecision(c.Request.Context(), sd)
	if err != nil {
		fail(c, err)
		return
	}
	b, err := recordJSON.Marshal(rec)
	if err != nil {
		fail(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json", b)
}
