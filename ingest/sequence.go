package ingest

// seqVerdict classifies a live sequence number against what a source has
// delivered so far.
type seqVerdict int

const (
	// seqFirst: nothing delivered from this source since ingest started;
	// what the engine published before is unknown here.
	seqFirst seqVerdict = iota
	// seqNext: exactly the successor of the last delivered seq.
	seqNext
	// seqGap: seqs between the last delivered and this one are missing
	// (PUB high-water mark, slow joiner, reconnect): replay them.
	seqGap
	// seqRestart: the seq did not advance. Engines count from 0 per process
	// and PUB/SUB never re-delivers, so the publisher restarted.
	seqRestart
)

func (v seqVerdict) String() string {
	return [...]string{"first", "next", "gap", "restart"}[v]
}

// seqTracker is the per-source sequence state. It is pure: the source loop
// decides what to do with a verdict (replay, reset) and reports what it
// delivered with advance.
type seqTracker struct {
	known bool
	last  uint64
}

func (t *seqTracker) classify(seq uint64) seqVerdict {
	switch {
	case !t.known:
		return seqFirst
	case seq == t.last+1:
		return seqNext
	case seq > t.last+1:
		return seqGap
	}
	return seqRestart
}

// advance records that seq was delivered.
func (t *seqTracker) advance(seq uint64) { t.known, t.last = true, seq }
