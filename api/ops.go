package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// healthz is liveness: the process serves HTTP. It never checks
// dependencies, so a slow broker does not get the pod restarted.
func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// readyz is readiness: 200 only when the state has caught up with the log
// as of start (Deps.Started) and its lag is within bound, so a replica
// that is still replaying takes no traffic.
func (s *Server) readyz(c *gin.Context) {
	if g := s.deps.Started; g != nil && !g.CaughtUp() {
		c.Header("Retry-After", "1")
		c.JSON(http.StatusServiceUnavailable, gin.H{"error": &Error{Code: "not_ready", Message: notCaughtUpMessage(g)},
			"total_lag": g.Remaining(), "bound": s.cfg.readyLag})
		return
	}
	lag, err := s.deps.State.TotalLag(c.Request.Context())
	if err != nil {
		fail(c, unavailable("not_ready", "cannot read the log's end offsets: "+err.Error(), 1))
		return
	}
	if lag > s.cfg.readyLag {
		c.Header("Retry-After", "1")
		c.JSON(http.StatusServiceUnavailable, gin.H{"error": &Error{Code: "not_ready",
			Message: "the state lags the log; wait for the replay to catch up"}, "total_lag": lag, "bound": s.cfg.readyLag})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready", "total_lag": lag, "bound": s.cfg.readyLag})
}

func (s *Server) state(c *gin.Context) {
	st, err := s.deps.State.Status(c.Request.Context())
	if err != nil {
		fail(c, unavailable("state_unavailable", err.Error(), 1))
		return
	}
	c.JSON(http.StatusOK, st)
}

func (s *Server) listWorkers(c *gin.Context) {
	ws := s.deps.State.Workers()
	if ws == nil {
		ws = []WorkerStatus{}
	}
	c.JSON(http.StatusOK, gin.H{"workers": ws})
}
