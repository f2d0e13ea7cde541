package decider

// Outcome is a decision's mode with its reason code. Each reason code comes
// with one mode (decideMode), so these pairs are every outcome there is.
type Outcome struct {
	Mode   Mode
	Reason Reason
}

// Outcomes lists every outcome a decision can have, so that whoever counts
// decisions by mode and reason can create each series at 0 from the start:
// a dashboard or an alert on a rare reason then sees 0 rather than nothing.
// TestOutcomesAreWhatDecisionsHave keeps it in step with decideMode. The
// list is built on each call: the decider holds no package state.
func Outcomes() []Outcome {
	return []Outcome{
		{ModeRemote, ReasonDeclinedByPolicy},
		{ModeLocal, ReasonAllowedGateDisabled},
		{ModeLocal, ReasonAllowedDecodeNotBusy},
		{ModeRemote, ReasonDeniedDecodeBusy},
		{ModeRemote, ReasonDeniedDecodeBusyUnknown},
		{ModeLocal, ReasonAggregatedNoPrefill},
		{ModeRemote, ReasonDisabled},
		{ModeLocal, ReasonSLOColdLocal},
		{ModeRemote, ReasonSLOColdRemote},
		{ModeLocal, ReasonSLOLocalBetter},
		{ModeRemote, ReasonSLORemoteBetter},
		{ModeRemote, ReasonSLODeniedITLGuard},
		{ModeRemote, ReasonSLODeniedQueueCap},
		{ModeLocal, ReasonSLOPrefillGuard},
	}
}
