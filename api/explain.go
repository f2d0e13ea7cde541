package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/pdrouter/pdrouter/replay"
)

// explainNoState is why the API's explanation has no state check: the
// check rebuilds the state at the decision's watermark by reading the Kafka
// log from a snapshot, and a replica's API only appends to the log (and must
// not spend a request on a rebuild that can read gigabytes). The CLI runs it.
const explainNoState = "the state check rebuilds the state at the watermark by reading the Kafka log, which this API does not read; run `pdrouter explain <decision-id>` for it"

// explain answers GET /v1/decisions/{id}/explain with the replay
// explanation of a decision, whether this replica's state holds it or the
// decisions topic does (decisionByID): the recompute from the
// record alone (invariant 6's pure check), the candidate table, the
// runner-up and its margin, and the rule that settled the mode with its
// distance. The body is replay.Explanation; a record that cannot be
// recomputed is still explained, with the reason in pure_check.error.
func (s *Server) explain(c *gin.Context) {
	rec, source, err := s.decisionByID(c.Request.Context(), c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	c.Header(HeaderDecisionSource, source)
	exp := replay.Explain(c.Request.Context(), rec, replay.ExplainOptions{NoStateReason: explainNoState})
	c.JSON(http.StatusOK, exp)
}
