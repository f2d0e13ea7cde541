// Package replay turns the decision log back into answers: why a decision
// went where it did (Explain), what a different policy would have done
// (WhatIf), which thresholds give a wanted local share (Tune), a flat,
// stable copy of the log for analytics (Export), and the log's traffic as a
// Mooncake trace for the simulator and the fleet planner (ExportTrace).
//
// Everything here rests on design.md invariant 6, "a decision explains
// itself": a DecisionRecord carries every input of the decider (the
// candidate table with each worker's overlap, load and capacity, the
// request's size and hash chains, and the config as the decider's canonical
// JSON). So a decision can be recomputed from its record alone, without the
// state it was made from:
//
//   - RecordView rebuilds a decider.View from the candidate table, and
//     ParseConfig rebuilds the decider.Config from config_json;
//   - Recompute runs the real decider on them, and Compare checks the result
//     field by field against the record (the pure check);
//   - the state check (StateChecker) goes further: it rebuilds the
//     replica's state at the record's watermark from the Kafka log, starting
//     from a snapshot when one exists, and decides again from that state, so
//     that a record whose inputs were wrong (not only its arithmetic) is
//     caught too, with the cause of each difference.
//
// What-if and tune reuse the pure recompute with another config: only the
// mode depends on the disaggregation policy (the worker choice does not), so
// recomputing each record's own candidate table under the new config is an
// exact counterfactual for the mode, not an estimate. It cannot say how the
// state would have evolved afterwards under the new policy (a flipped
// request would have loaded other workers); the load shift it reports is the
// first-order, per-decision one.
//
// Nothing in this package reads the wall clock to decide anything; progress
// logs are its only use of time.
package replay
