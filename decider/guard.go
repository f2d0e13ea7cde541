package decider

// decodeBusy evaluates the decode busy guard on the chosen decode worker d and records
// the check (conditional-disagg.md, Step 3):
//
//	decode_busy(d) = blocks(d) > decode_busy_threshold × total_kv_blocks(d)
//
// blocks(d) depends on decode_busy_source: router reads potential_decode_blocks(d),
// which includes this request; worker reads kv_used_blocks of the latest load sample;
// max reads the larger of the two.
//
// It returns known=false when the guard cannot tell, which denies the bypass: an unknown
// total_kv_blocks (the spec's rule), and, by the same reasoning, source=worker with no
// load sample. With source=max and no sample, the router projection is the larger of the
// values that exist, so it is used alone and the check stays known.
func decodeBusy(dst *Decision, d *Candidate, cfg *DisaggConfig) (known, busy bool) {
	c := Check{Name: CheckDecodeBusy, Evaluated: true, Known: true}
	router := float64(d.PotentialDecodeBlocks)
	switch cfg.DecodeBusySource {
	case BusySourceWorker:
		if d.LoadKnown {
			c.Value = float64(d.LoadKVUsedBlocks)
		} else {
			c.Known, c.Note = false, NoteWorkerSampleMissing
		}
	case BusySourceMax:
		if d.LoadKnown {
			c.Value = max(router, float64(d.LoadKVUsedBlocks))
		} else {
			c.Value, c.Note = router, NoteMaxUsedRouterOnly
		}
	default:
		c.Value = router
	}
	if d.TotalKVBlocks <= 0 {
		c.Known, c.Note = false, NoteTotalKVBlocksUnknown
	} else {
		c.Limit = cfg.DecodeBusyThreshold.Value * float64(d.TotalKVBlocks)
	}
	if c.Known {
		c.Hit = c.Value > c.Limit
	}
	dst.DecodeBusy = c
	return c.Known, c.Hit
}
