// Package latmodel is pdrouter's online latency model: it learns, from decisions joined
// with their outcomes, to predict a request's time to first token and mean inter-token
// latency on each path (local or remote prefill), and serves the fit to the decider's
// slo policy (docs/slo-policy.md).
//
// Why it is shaped this way: every replica materializes the decisions and outcomes
// topics, which it reads in its own interleaving, and the model is part of the state
// digest, so the model must be a function of the SET of joined samples and of the
// event-time clock, never of the order facts arrive in or of the wall clock:
//
//   - sufficient statistics are integers (count, Σx·xᵀ, Σx·y, Σy² per path, target and
//     event-time bucket of the decision): integer sums are commutative and associative,
//     and a sample can be taken out again exactly when a fact it came from changes;
//   - features and targets are clamped to 2^20, and a bucket's accumulator takes at most
//     2^22 samples, so no sum can overflow whatever a record claims;
//   - the window is the last Buckets buckets of event time before the clock (the max
//     event time of decisions and outcomes); a fact whose bucket has left the window is
//     absent, whether it arrived before the window moved or after, which is what makes
//     the join's pending facts bounded and order independent;
//   - the fit (ridge-regularized least squares on the window's sums) is recomputed from
//     the sums, deterministically, when they change.
//
// Targets are held in 100 µs units; the fit predicts ms (decider.LatencyFit).
//
// Files: model.go (the join and the sums), fit.go (the least-squares fit), codec.go
// (the canonical encodings the state stores and digests).
package latmodel
