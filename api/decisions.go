package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"google.golang.org/protobuf/encoding/protojson"
)

var recordJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false}

// getDecision returns a decision record, in the Protobuf JSON mapping of
// pdrouter.events.v1.DecisionRecord (what `log tail` prints): the state's,
// or one found on the decisions topic (decisionByID).
func (s *Server) getDecision(c *gin.Context) {
	rec, source, err := s.decisionByID(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.Header(HeaderDecisionSource, source)
	b, err := recordJSON.Marshal(rec)
	if err != nil {
		fail(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json", b)
}
