package sim

import "strconv"

// MooncakeWriter formats requests as Mooncake JSONL, the format ReadMooncake reads.
// It numbers each distinct block key densely, in order of first appearance, as the
// published traces are numbered; so the same requests in the same order always
// give the same bytes, whatever the keys' values.
type MooncakeWriter struct {
	ids map[uint64]int
}

// NewMooncakeWriter returns a writer that has numbered no block yet.
func NewMooncakeWriter() *MooncakeWriter {
	return &MooncakeWriter{ids: map[uint64]int{}}
}

// AppendLine appends one request's line to b: its arrival in ms since the trace's
// start, its prompt and output lengths in tokens, and the keys of its prompt's
// blocks, in prompt order.
func (w *MooncakeWriter) AppendLine(b []byte, timestampMs int64, input, output int, blocks []uint64) []byte {
	b = append(b, `{"timestamp": `...)
	b = strconv.AppendInt(b, timestampMs, 10)
	b = append(b, `, "input_length": `...)
	b = strconv.AppendInt(b, int64(input), 10)
	b = append(b, `, "output_length": `...)
	b = strconv.AppendInt(b, int64(output), 10)
	b = append(b, `, "hash_ids": [`...)
	for i, k := range blocks {
		id, ok := w.ids[k]
		if !ok {
			id = len(w.ids)
			w.ids[k] = id
		}
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, "]}\n"...)
}
