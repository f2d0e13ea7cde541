package decider

// clampOverlap makes a view's answer safe to credit: no negative counts, and no more
// blocks than the chain has complete blocks (only complete blocks count). When it has to
// trim, it trims the lowest tier first, because a leading run is device first and the
// lower tiers hold its further end.
func clampOverlap(o TierOverlap, chainLen int) TierOverlap {
	o.Device = max(o.Device, 0)
	o.Host = max(o.Host, 0)
	o.Disk = max(o.Disk, 0)
	over := o.Total() - chainLen
	if over <= 0 {
		return o
	}
	t := min(over, o.Disk)
	o.Disk -= t
	over -= t
	t = min(over, o.Host)
	o.Host -= t
	over -= t
	o.Device -= min(over, o.Device)
	return o
}

// cachedTokens is the credit C = round((overlap + 0.75·host + 0.25·disk) × B).
//
// It is computed in integers, as round((4·overlap + 3·host + disk)·B / 4) with halves
// rounded up, so that the credit has no floating-point error and is the same on every
// platform. Only complete blocks are counted (the overlap counts come from a chain of
// complete blocks), and C is rounded to the nearest token, never up to a whole block.
func cachedTokens(o TierOverlap, blockSize int) int64 {
	quarterBlocks := 4*int64(o.Device) + 3*int64(o.Host) + int64(o.Disk)
	return (quarterBlocks*int64(blockSize) + 2) / 4
}

// effectiveISL returns eff = P − min(C, P) and ratio = eff / max(P, 1).
func effectiveISL(p, c int64) (eff int64, ratio float64) {
	eff = p - min(c, p)
	return eff, float64(eff) / float64(max(p, 1))
}
