package decider

// Exclusion reasons recorded in Candidate.Excluded. Pool and model are not exclusions:
// a worker of another pool or model is simply not a candidate and gets no row, which
// keeps the table of a multi-model fleet to the request's own model.
const (
	ExcludedUnhealthy   = "unhealthy"
	ExcludedUnavailable = "unavailable"
	ExcludedNoBlockSize = "block_size_unknown"
)

// exclusion is the busy/availability filter chain for one candidate worker. It returns
// "" for an eligible worker. Each filter is one line so that the order in which they are
// reported is explicit: the first that applies is the one recorded.
func exclusion(w *WorkerInfo) string {
	if w.Unhealthy {
		return ExcludedUnhealthy
	}
	if w.Unavailable {
		return ExcludedUnavailable
	}
	if w.BlockSize <= 0 {
		return ExcludedNoBlockSize
	}
	return ""
}
