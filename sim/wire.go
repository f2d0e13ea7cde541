package sim

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// WireFormat is how events are encoded inside a batch. The batch itself is always the
// positional array [ts, events, data_parallel_rank] (kv-event-formats.md §1.4).
type WireFormat uint8

const (
	// WireMap is vLLM ≥ v0.24's encoding: each event a map {"type": tag, field: value,
	// …} in declaration order, None-defaulted fields left out when None. The default.
	WireMap WireFormat = iota
	// WirePositional is vLLM v0.22/v0.23's encoding: each event an array with the tag
	// first and every declared field present (12 fields for BlockStored).
	WirePositional
)

// ParseWireFormat reads "map" or "positional".
func ParseWireFormat(s string) (WireFormat, error) {
	switch s {
	case "", "map":
		return WireMap, nil
	case "positional", "array":
		return WirePositional, nil
	}
	return 0, fmt.Errorf("wire format %q: want map or positional", s)
}

func (f WireFormat) String() string {
	if f == WirePositional {
		return "positional"
	}
	return "map"
}

// wireSpecKind is what the simulated engine reports of its KV cache: an ordinary
// (single KV cache group, full attention) model without LoRA.
const wireSpecKind = "full_attention"

// medium is the event's medium on the wire: the GPU prefix cache unless it names
// another tier.
func (ev *KVEvent) medium() string {
	if ev.Medium == "" {
		return MediumGPU
	}
	return ev.Medium
}

// EncodeBatch encodes one batch as a vLLM engine does (msgspec's scalar choices:
// float64 timestamp, the smallest integer encoding, unsigned 64-bit block hashes).
func EncodeBatch(ts float64, events []KVEvent, dpRank int, f WireFormat) []byte {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	w := wireWriter{enc: enc}
	w.arrayLen(3)
	w.err(enc.EncodeFloat64(ts))
	w.arrayLen(len(events))
	for i := range events {
		if f == WirePositional {
			w.positional(&events[i])
		} else {
			w.mapped(&events[i])
		}
	}
	w.err(enc.EncodeInt(int64(dpRank)))
	if w.e != nil {
		// Writing to a bytes.Buffer cannot fail; a failure here is a bug.
		panic(fmt.Sprintf("sim: encode batch: %v", w.e))
	}
	return buf.Bytes()
}

type wireWriter struct {
	enc *msgpack.Encoder
	e   error
}

func (w *wireWriter) err(e error) {
	if w.e == nil {
		w.e = e
	}
}
func (w *wireWriter) arrayLen(n int) { w.err(w.enc.EncodeArrayLen(n)) }
func (w *wireWriter) str(s string)   { w.err(w.enc.EncodeString(s)) }
func (w *wireWriter) nil_()          { w.err(w.enc.EncodeNil()) }
func (w *wireWriter) uint(v uint64)  { w.err(w.enc.EncodeUint(v)) }

func (w *wireWriter) hashes(hs []uint64) {
	w.arrayLen(len(hs))
	for _, h := range hs {
		w.uint(h)
	}
}

func (w *wireWriter) parent(ev *KVEvent) {
	if ev.HasParent {
		w.uint(ev.Parent)
	} else {
		w.nil_()
	}
}

func (w *wireWriter) tokens(ts []uint32) {
	w.arrayLen(len(ts))
	for _, t := range ts {
		w.uint(uint64(t))
	}
}

// extraKeys writes one nil per block: a request without LoRA, multimodal inputs or
// cache salt has no extra hash keys.
func (w *wireWriter) extraKeys(n int) {
	w.arrayLen(n)
	for range n {
		w.nil_()
	}
}

// offloaded reports whether ev is a store of the CPU tier, which vLLM's
// OffloadingConnector announces with only block_hashes, parent_block_hash (nil),
// token_ids (empty), block_size, lora_id, medium and lora_name set: the fields after
// them keep their default of nil.
func (ev *KVEvent) offloaded() bool { return ev.Kind == BlockStored && ev.Medium == MediumCPU }

func (w *wireWriter) positional(ev *KVEvent) {
	switch ev.Kind {
	case BlockStored:
		w.arrayLen(12)
		w.str("BlockStored")
		w.hashes(ev.Hashes)
		w.parent(ev)
		w.tokens(ev.Tokens)
		w.uint(uint64(ev.BlockSize))
		w.nil_() // lora_id
		w.str(ev.medium())
		w.nil_() // lora_name
		if ev.offloaded() {
			w.nil_() // extra_keys
			w.nil_() // group_idx
			w.nil_() // kv_cache_spec_kind
		} else {
			w.extraKeys(len(ev.Hashes))
			w.uint(0) // group_idx
			w.str(wireSpecKind)
		}
		w.nil_() // kv_cache_spec_sliding_window
	case BlockRemoved:
		w.arrayLen(4)
		w.str("BlockRemoved")
		w.hashes(ev.Hashes)
		w.str(ev.medium())
		w.uint(0) // group_idx
	case AllBlocksCleared:
		w.arrayLen(1)
		w.str("AllBlocksCleared")
	}
}

func (w *wireWriter) mapped(ev *KVEvent) {
	switch ev.Kind {
	case BlockStored:
		// Fields whose value is their default of None are left out: always
		// kv_cache_spec_sliding_window, and for a CPU store the three before it.
		if ev.offloaded() {
			w.err(w.enc.EncodeMapLen(8))
		} else {
			w.err(w.enc.EncodeMapLen(11))
		}
		w.str("type")
		w.str("BlockStored")
		w.str("block_hashes")
		w.hashes(ev.Hashes)
		w.str("parent_block_hash")
		w.parent(ev)
		w.str("token_ids")
		w.tokens(ev.Tokens)
		w.str("block_size")
		w.uint(uint64(ev.BlockSize))
		w.str("lora_id")
		w.nil_()
		w.str("medium")
		w.str(ev.medium())
		w.str("lora_name")
		w.nil_()
		if ev.offloaded() {
			return
		}
		w.str("extra_keys")
		w.extraKeys(len(ev.Hashes))
		w.str("group_idx")
		w.uint(0)
		w.str("kv_cache_spec_kind")
		w.str(wireSpecKind)
	case BlockRemoved:
		w.err(w.enc.EncodeMapLen(4))
		w.str("type")
		w.str("BlockRemoved")
		w.str("block_hashes")
		w.hashes(ev.Hashes)
		w.str("medium")
		w.str(ev.medium())
		w.str("group_idx")
		w.uint(0)
	case AllBlocksCleared:
		w.err(w.enc.EncodeMapLen(1))
		w.str("type")
		w.str("AllBlocksCleared")
	}
}
