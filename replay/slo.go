package replay

import (
	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// sloOf reads the slo policy's predictions out of a record (zero when absent).
func sloOf(s *pb.SloPrediction) decider.SLOPrediction {
	if s == nil {
		return decider.SLOPrediction{}
	}
	return decider.SLOPrediction{
		Evaluated: s.GetEvaluated(), Warm: s.GetWarm(), Samples: s.GetSamples(),
		TTFTLimitMs: s.GetSloTtftMs(), ITLLimitMs: s.GetSloItlMs(),
		LocalTTFTMs: s.GetLocalTtftMs(), LocalITLMs: s.GetLocalItlMs(),
		RemoteTTFTMs: s.GetRemoteTtftMs(), RemoteITLMs: s.GetRemoteItlMs(),
		RunningRequests: s.GetRunningRequests(), OthersITLMs: s.GetOthersItlMs(), OthersBaseITLMs: s.GetOthersBaseItlMs(),
		NextTTFTMs: s.GetNextTtftMs(), NextITLMs: s.GetNextItlMs(), RemoteDecodeTTFTMs: s.GetRemoteDecodeTtftMs(),
		LocalGoodput: s.GetLocalGoodput(), RemoteGoodput: s.GetRemoteGoodput(), Margin: s.GetMargin(),
		LocalDelayCharge: s.GetLocalDelayCharge(), RemoteDelayCharge: s.GetRemoteDelayCharge(), TypicalTTFTMs: s.GetTypicalTtftMs(),
		Fit: fitOf(s.GetFit()),
	}
}

// sloPB is the record's form of the predictions: nil unless the slo policy ran.
func sloPB(s *decider.SLOPrediction) *pb.SloPrediction {
	if !s.Evaluated {
		return nil
	}
	return &pb.SloPrediction{
		Evaluated: true, Warm: s.Warm, Samples: s.Samples, SloTtftMs: s.TTFTLimitMs, SloItlMs: s.ITLLimitMs,
		LocalTtftMs: s.LocalTTFTMs, LocalItlMs: s.LocalITLMs, RemoteTtftMs: s.RemoteTTFTMs, RemoteItlMs: s.RemoteITLMs,
		RunningRequests: s.RunningRequests, OthersItlMs: s.OthersITLMs, OthersBaseItlMs: s.OthersBaseITLMs,
		NextTtftMs: s.NextTTFTMs, NextItlMs: s.NextITLMs, RemoteDecodeTtftMs: s.RemoteDecodeTTFTMs,
		LocalGoodput: s.LocalGoodput, RemoteGoodput: s.RemoteGoodput, Margin: s.Margin, Fit: fitPB(&s.Fit),
		LocalDelayCharge: s.LocalDelayCharge, RemoteDelayCharge: s.RemoteDelayCharge, TypicalTtftMs: s.TypicalTTFTMs,
	}
}

// fitPB flattens a fit in the record's order: path, then target, then feature. A fit
// with no sample is left out.
func fitPB(f *decider.LatencyFit) *pb.LatencyFit {
	if *f == (decider.LatencyFit{}) {
		return nil
	}
	out := &pb.LatencyFit{}
	for p := range f.Samples {
		for t := range f.Samples[p] {
			out.Samples = append(out.Samples, f.Samples[p][t])
			out.Sigma = append(out.Sigma, f.Sigma[p][t])
			out.Coef = append(out.Coef, f.Coef[p][t][:]...)
			out.Mean = append(out.Mean, f.Mean[p][t])
		}
	}
	return out
}

// fitOf is the inverse of fitPB. A fit of another shape (a record from a build with
// other features) is not guessed at: it reads as no fit, and the recompute falls back
// as the cold policy does. Means are absent in records of builds before them (decider
// version 2, which does not read them): they read as 0.
func fitOf(f *pb.LatencyFit) decider.LatencyFit {
	var out decider.LatencyFit
	const n = decider.NumPaths * decider.NumTargets
	if f == nil || len(f.GetSamples()) != n || len(f.GetSigma()) != n || len(f.GetCoef()) != n*decider.LatencyK ||
		len(f.GetMean()) != 0 && len(f.GetMean()) != n {
		return out
	}
	mean := f.GetMean()
	i := 0
	for p := range out.Samples {
		for t := range out.Samples[p] {
			out.Samples[p][t] = f.GetSamples()[i]
			out.Sigma[p][t] = f.GetSigma()[i]
			copy(out.Coef[p][t][:], f.GetCoef()[i*decider.LatencyK:])
			if len(mean) == n {
				out.Mean[p][t] = mean[i]
			}
			i++
		}
	}
	return out
}

// LatencyFit implements decider.LatencyModel with the fit the record's decision was
// made with, so that an slo decision recomputes exactly; records of other policies
// carry none, and under slo they recompute as the cold policy.
func (v *RecordView) LatencyFit() *decider.LatencyFit { return v.fit }
