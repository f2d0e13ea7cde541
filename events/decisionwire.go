package events

import (
	"encoding/binary"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A hand-written encoder for DecisionRecord, the largest record the router
// writes on its hot path: one per answered decision, with a row per
// candidate worker (25 fields each, 160 rows in a fleet of 128 decode and
// 32 prefill workers) and the prompt's hash chain. The generic protobuf
// encoder spent ~59 µs on such a 26 KB record, the largest share of the
// durable append.
//
// It produces exactly the bytes of proto.MarshalOptions{Deterministic:
// true}: fields in field-number order, proto3 zero values left out (a
// double is left out only when it is +0: -0 and NaN are written), repeated
// fixed64 packed, nested messages length-prefixed. It handles only what it
// can encode exactly, and leaves the rest to the generic encoder, which
// then encodes it or fails with its own error: a message carrying unknown
// fields (a record decoded from a newer schema), a nil element in a
// repeated field, or a string that is not valid UTF-8.
// TestDecisionWireMatchesProto compares both on random records;
// TestDecisionWireCoversEverySchemaField on a record with every field of
// the schema's descriptor set, so a field added to decisions.proto and not
// here fails it instead of vanishing from the audit record.

// decisionParts selects the bulky parts of a record appendDecision
// writes; the header (every other field) is always written.
type decisionParts uint8

const (
	partTable  decisionParts = 1 << iota // candidates (field 19)
	partChains                           // chains (field 20)

	wholeDecision = partTable | partChains
)

// appendDecision appends the encoding of d, with the parts selected, to b;
// ok is false when d needs the generic encoder.
func appendDecision(b []byte, d *pb.DecisionRecord, parts decisionParts) (_ []byte, ok bool) {
	if !decisionEncodable(d, parts) {
		return b, false
	}
	b = appendString(b, 1, d.DecisionId)
	b = appendString(b, 2, d.RequestId)
	b = appendFixed64(b, 3, d.RequestDigest)
	b = appendString(b, 4, d.Model)
	b = appendString(b, 5, d.LoraName)
	b = appendUvarint(b, 6, uint64(d.PromptTokens))
	b = appendUvarint(b, 7, uint64(d.ExpectedOutputTokens))
	b = appendString(b, 8, d.Mode)
	b = appendMessage(b, 9, d.DecodeWorker, appendWorkerRef)
	b = appendMessage(b, 10, d.PrefillWorker, appendWorkerRef)
	b = appendString(b, 11, d.Reason)
	b = appendUvarint(b, 12, uint64(d.CachedTokens))
	b = appendUvarint(b, 13, uint64(d.EffectiveIsl))
	b = appendDouble(b, 14, d.EffectiveIslRatio)
	b = appendString(b, 15, d.Policy)
	b = appendString(b, 16, d.ConfigHash)
	b = appendString(b, 17, d.ConfigJson)
	b = appendMessage(b, 18, d.Watermark, appendWatermark)
	if parts&partTable != 0 {
		for _, c := range d.Candidates {
			b = appendMessage(b, 19, c, appendCandidate)
		}
	}
	if parts&partChains != 0 {
		for _, c := range d.Chains {
			b = appendMessage(b, 20, c, appendHashChain)
		}
	}
	b = appendUvarint(b, 21, uint64(d.BlockSize))
	b = appendUvarint(b, 22, uint64(d.DecidedAtUnixNano))
	b = appendString(b, 23, d.ReplicaId)
	b = appendUvarint(b, 24, uint64(d.DeciderVersion))
	b = appendBool(b, 25, d.PolicyBypass)
	b = appendString(b, 26, d.DecidedBy)
	b = appendDouble(b, 27, d.Distance)
	b = appendMessage(b, 28, d.EffIslCheck, appendCheck)
	b = appendMessage(b, 29, d.RatioCheck, appendCheck)
	b = appendMessage(b, 30, d.PrefillBusyCheck, appendCheck)
	b = appendMessage(b, 31, d.DecodeBusyCheck, appendCheck)
	b = appendMessage(b, 32, d.OmittedCandidates, appendOmittedCandidates)
	b = appendString(b, 33, d.RetryOfDecisionId)
	b = appendMessage(b, 40, d.Slo, appendSloPrediction)
	return b, true
}

// decisionSizeHint is a capacity for d's encoding that is usually enough,
// so the buffer is rarely grown and copied.
func decisionSizeHint(d *pb.DecisionRecord) int {
	n := 512 + len(d.ConfigJson) + 128*len(d.Candidates)
	for _, c := range d.Chains {
		n += 16 + 8*len(c.GetBlockHashes())
	}
	return n
}

func appendWorkerRef(b []byte, w *pb.WorkerRef) []byte {
	b = appendString(b, 1, w.WorkerId)
	return appendUvarint(b, 2, uint64(w.DpRank))
}

func appendWatermark(b []byte, w *pb.Watermark) []byte {
	for _, t := range w.Topics {
		b = appendMessage(b, 1, t, appendTopicOffsets)
	}
	return b
}

func appendTopicOffsets(b []byte, t *pb.TopicOffsets) []byte {
	b = appendString(b, 1, t.Topic)
	for _, p := range t.Partitions {
		b = appendMessage(b, 2, p, appendPartitionOffset)
	}
	return b
}

func appendPartitionOffset(b []byte, p *pb.PartitionOffset) []byte {
	b = appendUvarint(b, 1, uint64(p.Partition)) // int32: sign-extended
	return appendUvarint(b, 2, uint64(p.Offset))
}

func appendHashChain(b []byte, c *pb.HashChain) []byte {
	b = appendUvarint(b, 1, uint64(c.BlockSize))
	if len(c.BlockHashes) > 0 {
		b = appendVarint(appendTag(b, 2, protowire.BytesType), uint64(8*len(c.BlockHashes)))
		for _, h := range c.BlockHashes {
			b = binary.LittleEndian.AppendUint64(b, h)
		}
	}
	return appendUvarint(b, 3, uint64(c.OmittedBlocks))
}

func appendOmittedCandidates(b []byte, o *pb.OmittedCandidates) []byte {
	b = appendUvarint(b, 1, uint64(o.Decode))
	b = appendUvarint(b, 2, uint64(o.Prefill))
	return appendUvarint(b, 3, uint64(o.Eligible))
}

func appendCandidate(b []byte, c *pb.Candidate) []byte {
	b = appendMessage(b, 1, c.Worker, appendWorkerRef)
	b = appendUvarint(b, 2, uint64(c.Pool))
	b = appendBool(b, 3, c.Eligible)
	b = appendString(b, 4, c.Excluded)
	b = appendUvarint(b, 5, uint64(c.BlockSize))
	b = appendUvarint(b, 6, uint64(c.OverlapBlocks))
	b = appendUvarint(b, 7, uint64(c.HostBlocks))
	b = appendUvarint(b, 8, uint64(c.DiskBlocks))
	b = appendUvarint(b, 9, uint64(c.ActivePrefillTokens))
	b = appendDouble(b, 10, c.RawPrefillBlocks)
	b = appendDouble(b, 11, c.OverlapCredit)
	b = appendDouble(b, 12, c.PrefillTerm)
	b = appendUvarint(b, 13, uint64(c.ActiveDecodeBlocks))
	b = appendUvarint(b, 14, uint64(c.RequestBlocks))
	b = appendUvarint(b, 15, uint64(c.SharedActiveBlocks))
	b = appendUvarint(b, 16, uint64(c.PotentialDecodeBlocks))
	b = appendDouble(b, 17, c.Cost)
	b = appendFixed64(b, 18, c.TieHash)
	b = appendDouble(b, 19, c.Probability)
	b = appendUvarint(b, 20, uint64(c.TotalKvBlocks))
	b = appendUvarint(b, 21, uint64(c.MaxNumBatchedTokens))
	b = appendBool(b, 22, c.LoadKnown)
	b = appendUvarint(b, 23, uint64(c.LoadKvUsedBlocks))
	b = appendUvarint(b, 24, uint64(c.LoadPrefillTokens))
	b = appendBool(b, 25, c.Picked)
	b = appendUvarint(b, 26, uint64(c.ActiveRequests))
	b = appendUvarint(b, 27, uint64(c.RecentLocalPrefill))
	return appendUvarint(b, 28, uint64(c.RecentRequests))
}

func appendSloPrediction(b []byte, s *pb.SloPrediction) []byte {
	b = appendBool(b, 1, s.Evaluated)
	b = appendBool(b, 2, s.Warm)
	b = appendUvarint(b, 3, uint64(s.Samples))
	b = appendDouble(b, 4, s.SloTtftMs)
	b = appendDouble(b, 5, s.SloItlMs)
	b = appendDouble(b, 6, s.LocalTtftMs)
	b = appendDouble(b, 7, s.LocalItlMs)
	b = appendDouble(b, 8, s.RemoteTtftMs)
	b = appendDouble(b, 9, s.RemoteItlMs)
	b = appendUvarint(b, 10, uint64(s.RunningRequests))
	b = appendDouble(b, 11, s.OthersItlMs)
	b = appendDouble(b, 12, s.OthersBaseItlMs)
	b = appendDouble(b, 13, s.LocalGoodput)
	b = appendDouble(b, 14, s.RemoteGoodput)
	b = appendDouble(b, 15, s.Margin)
	b = appendMessage(b, 16, s.Fit, appendLatencyFit)
	b = appendDouble(b, 17, s.NextTtftMs)
	b = appendDouble(b, 18, s.NextItlMs)
	b = appendDouble(b, 19, s.RemoteDecodeTtftMs)
	b = appendDouble(b, 20, s.LocalDelayCharge)
	b = appendDouble(b, 21, s.RemoteDelayCharge)
	return appendDouble(b, 22, s.TypicalTtftMs)
}

func appendLatencyFit(b []byte, f *pb.LatencyFit) []byte {
	if len(f.Samples) > 0 {
		n := 0
		for _, v := range f.Samples {
			n += protowire.SizeVarint(uint64(v))
		}
		b = appendVarint(appendTag(b, 1, protowire.BytesType), uint64(n))
		for _, v := range f.Samples {
			b = protowire.AppendVarint(b, uint64(v))
		}
	}
	for _, x := range []struct {
		num protowire.Number
		vs  []float64
	}{{2, f.Sigma}, {3, f.Coef}, {4, f.Mean}} {
		if len(x.vs) > 0 {
			b = appendVarint(appendTag(b, x.num, protowire.BytesType), uint64(8*len(x.vs)))
			for _, v := range x.vs {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
			}
		}
	}
	return b
}

func appendCheck(b []byte, c *pb.Check) []byte {
	b = appendString(b, 1, c.Name)
	b = appendBool(b, 2, c.Evaluated)
	b = appendBool(b, 3, c.Known)
	b = appendDouble(b, 4, c.Value)
	b = appendDouble(b, 5, c.Limit)
	b = appendBool(b, 6, c.Hit)
	return appendString(b, 7, c.Note)
}

// appendMessage appends m as field num, unless m is nil (absent). The
// length goes before the body, which is encoded first and then moved up by
// the length's size: nested messages here are small, and this saves a
// sizing pass over them.
func appendMessage[T comparable](b []byte, num protowire.Number, m T, enc func([]byte, T) []byte) []byte {
	var zero T
	if m == zero {
		return b
	}
	b = appendTag(b, num, protowire.BytesType)
	at := len(b)
	b = enc(b, m)
	n := len(b) - at
	w := protowire.SizeVarint(uint64(n))
	for range w {
		b = append(b, 0)
	}
	copy(b[at+w:], b[at:at+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, num, protowire.BytesType)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendUvarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, num, protowire.VarintType), v)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return append(appendTag(b, num, protowire.VarintType), 1)
}

// appendDouble leaves out +0 only: -0 and NaN have other bits and are
// written.
func appendDouble(b []byte, num protowire.Number, v float64) []byte {
	return appendFixed64(b, num, math.Float64bits(v))
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.LittleEndian.AppendUint64(appendTag(b, num, protowire.Fixed64Type), v)
}

// appendTag and appendVarint are protowire's, in a form the compiler
// inlines: most tags and values here are one or two bytes, and the call
// was most of the encoder's time.
func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	return appendVarint(b, uint64(num)<<3|uint64(typ))
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// decisionEncodable reports whether appendDecision encodes d's header and
// the parts selected exactly: no unknown fields, no nil in a repeated
// field, every string valid UTF-8.
func decisionEncodable(d *pb.DecisionRecord, parts decisionParts) bool {
	if !plain(d) || !utf8s(d.DecisionId, d.RequestId, d.Model, d.LoraName, d.Mode, d.Reason, d.Policy,
		d.ConfigHash, d.ConfigJson, d.ReplicaId, d.DecidedBy, d.RetryOfDecisionId) {
		return false
	}
	if !workerRefOK(d.DecodeWorker) || !workerRefOK(d.PrefillWorker) {
		return false
	}
	if w := d.Watermark; w != nil {
		if !plain(w) {
			return false
		}
		for _, t := range w.Topics {
			if t == nil || !plain(t) || !utf8.ValidString(t.Topic) {
				return false
			}
			for _, p := range t.Partitions {
				if p == nil || !plain(p) {
					return false
				}
			}
		}
	}
	if parts&partTable != 0 {
		for _, c := range d.Candidates {
			if c == nil || !plain(c) || !workerRefOK(c.Worker) || !utf8.ValidString(c.Excluded) {
				return false
			}
		}
	}
	if parts&partChains != 0 {
		for _, c := range d.Chains {
			if c == nil || !plain(c) {
				return false
			}
		}
	}
	if o := d.OmittedCandidates; o != nil && !plain(o) {
		return false
	}
	if s := d.Slo; s != nil && (!plain(s) || (s.Fit != nil && !plain(s.Fit))) {
		return false
	}
	for _, c := range []*pb.Check{d.EffIslCheck, d.RatioCheck, d.PrefillBusyCheck, d.DecodeBusyCheck} {
		if c != nil && (!plain(c) || !utf8s(c.Name, c.Note)) {
			return false
		}
	}
	return true
}

func workerRefOK(w *pb.WorkerRef) bool {
	return w == nil || (plain(w) && utf8.ValidString(w.WorkerId))
}

// plain: m carries no unknown fields.
func plain(m protoreflect.ProtoMessage) bool {
	return len(m.ProtoReflect().GetUnknown()) == 0
}

func utf8s(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}
