package replay

import pb "github.com/pdrouter/pdrouter/events/eventspb"

// SLORow is the slo policy's predictions in an export row (the record's slo field),
// null for decisions of other policies. The fit is flattened as in the record (path,
// then target, then feature), so that a row recomputes, and what-ifs under slo, as
// its record does.
type SLORow struct {
	Evaluated          bool      `parquet:"evaluated" json:"evaluated"`
	Warm               bool      `parquet:"warm" json:"warm"`
	Samples            int64     `parquet:"samples" json:"samples"`
	SLOTTFTMs          float64   `parquet:"slo_ttft_ms" json:"slo_ttft_ms"`
	SLOITLMs           float64   `parquet:"slo_itl_ms" json:"slo_itl_ms"`
	LocalTTFTMs        float64   `parquet:"local_ttft_ms" json:"local_ttft_ms"`
	LocalITLMs         float64   `parquet:"local_itl_ms" json:"local_itl_ms"`
	RemoteTTFTMs       float64   `parquet:"remote_ttft_ms" json:"remote_ttft_ms"`
	RemoteITLMs        float64   `parquet:"remote_itl_ms" json:"remote_itl_ms"`
	RunningRequests    int64     `parquet:"running_requests" json:"running_requests"`
	OthersITLMs        float64   `parquet:"others_itl_ms" json:"others_itl_ms"`
	OthersBaseITLMs    float64   `parquet:"others_base_itl_ms" json:"others_base_itl_ms"`
	NextTTFTMs         float64   `parquet:"next_ttft_ms" json:"next_ttft_ms"`
	NextITLMs          float64   `parquet:"next_itl_ms" json:"next_itl_ms"`
	RemoteDecodeTTFTMs float64   `parquet:"remote_decode_ttft_ms" json:"remote_decode_ttft_ms"`
	LocalGoodput       float64   `parquet:"local_goodput" json:"local_goodput"`
	RemoteGoodput      float64   `parquet:"remote_goodput" json:"remote_goodput"`
	LocalDelayCharge   float64   `parquet:"local_delay_charge" json:"local_delay_charge"`
	RemoteDelayCharge  float64   `parquet:"remote_delay_charge" json:"remote_delay_charge"`
	TypicalTTFTMs      float64   `parquet:"typical_ttft_ms" json:"typical_ttft_ms"`
	Margin             float64   `parquet:"margin" json:"margin"`
	FitSamples         []int64   `parquet:"fit_samples,list" json:"fit_samples"`
	FitSigma           []float64 `parquet:"fit_sigma,list" json:"fit_sigma"`
	FitCoef            []float64 `parquet:"fit_coef,list" json:"fit_coef"`
	FitMean            []float64 `parquet:"fit_mean,list" json:"fit_mean"`
}

// sloRowOf is the row form of a record's predictions (nil when it has none).
func sloRowOf(s *pb.SloPrediction) *SLORow {
	if s == nil {
		return nil
	}
	f := s.GetFit()
	return &SLORow{
		Evaluated: s.GetEvaluated(), Warm: s.GetWarm(), Samples: s.GetSamples(), SLOTTFTMs: s.GetSloTtftMs(), SLOITLMs: s.GetSloItlMs(),
		LocalTTFTMs: s.GetLocalTtftMs(), LocalITLMs: s.GetLocalItlMs(), RemoteTTFTMs: s.GetRemoteTtftMs(), RemoteITLMs: s.GetRemoteItlMs(),
		RunningRequests: s.GetRunningRequests(), OthersITLMs: s.GetOthersItlMs(), OthersBaseITLMs: s.GetOthersBaseItlMs(),
		NextTTFTMs: s.GetNextTtftMs(), NextITLMs: s.GetNextItlMs(), RemoteDecodeTTFTMs: s.GetRemoteDecodeTtftMs(),
		LocalGoodput: s.GetLocalGoodput(), RemoteGoodput: s.GetRemoteGoodput(), LocalDelayCharge: s.GetLocalDelayCharge(),
		RemoteDelayCharge: s.GetRemoteDelayCharge(), TypicalTTFTMs: s.GetTypicalTtftMs(), Margin: s.GetMargin(),
		FitSamples: f.GetSamples(), FitSigma: f.GetSigma(), FitCoef: f.GetCoef(), FitMean: f.GetMean(),
	}
}

// record is the inverse of sloRowOf.
func (r *SLORow) record() *pb.SloPrediction {
	if r == nil {
		return nil
	}
	s := &pb.SloPrediction{
		Evaluated: r.Evaluated, Warm: r.Warm, Samples: r.Samples, SloTtftMs: r.SLOTTFTMs, SloItlMs: r.SLOITLMs,
		LocalTtftMs: r.LocalTTFTMs, LocalItlMs: r.LocalITLMs, RemoteTtftMs: r.RemoteTTFTMs, RemoteItlMs: r.RemoteITLMs,
		RunningRequests: r.RunningRequests, OthersItlMs: r.OthersITLMs, OthersBaseItlMs: r.OthersBaseITLMs,
		NextTtftMs: r.NextTTFTMs, NextItlMs: r.NextITLMs, RemoteDecodeTtftMs: r.RemoteDecodeTTFTMs,
		LocalGoodput: r.LocalGoodput, RemoteGoodput: r.RemoteGoodput, LocalDelayCharge: r.LocalDelayCharge,
		RemoteDelayCharge: r.RemoteDelayCharge, TypicalTtftMs: r.TypicalTTFTMs, Margin: r.Margin,
	}
	if len(r.FitSamples) > 0 || len(r.FitSigma) > 0 || len(r.FitCoef) > 0 || len(r.FitMean) > 0 {
		s.Fit = &pb.LatencyFit{Samples: r.FitSamples, Sigma: r.FitSigma, Coef: r.FitCoef, Mean: r.FitMean}
	}
	return s
}
