package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// EndSeq is the seq frame of the replay end marker (-1 as 8 bytes).
const EndSeq = ^uint64(0)

// Frame errors, for errors.Is.
var (
	ErrFrames  = errors.New("unexpected ZMQ frame count")
	ErrSeqSize = errors.New("seq frame is not 8 bytes")
)

// SeqFrame encodes a sequence number as engines do: 8 bytes big-endian.
func SeqFrame(seq uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return b[:]
}

// ParseSeq decodes an 8-byte big-endian seq frame. Engines always send
// exactly 8 bytes; anything else is refused rather than guessed.
func ParseSeq(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: %d bytes", ErrSeqSize, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// Message is one engine batch as framed on the wire.
type Message struct {
	Topic   []byte
	Seq     uint64
	Payload []byte
}

// ParseLive splits a live PUB message: [topic, seq, payload]. The topic
// frame is present even when empty.
func ParseLive(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("%w: live message has %d frames, want 3 [topic, seq, payload]", ErrFrames, len(frames))
	}
	seq, err := ParseSeq(frames[1])
	if err != nil {
		return Message{}, err
	}
	return Message{Topic: frames[0], Seq: seq, Payload: frames[2]}, nil
}

// ParseReplay splits one reply read by a DEALER from an engine's replay
// ROUTER. The two generations differ by the topic frame:
//
//	vLLM <= v0.25, SGLang: [empty, seq, payload]
//	vLLM >= v0.26:         [empty, topic, seq, payload]
//
// A leading empty delimiter is dropped; then 3 frames carry a topic and 2
// do not. end is true for the end marker (seq frame ff x 8), whose payload
// is empty.
func ParseReplay(frames [][]byte) (m Message, end bool, err error) {
	if len(frames) > 0 && len(frames[0]) == 0 && len(frames) >= 3 {
		frames = frames[1:]
	}
	var seqFrame []byte
	switch len(frames) {
	case 2:
		seqFrame, m.Payload = frames[0], frames[1]
	case 3:
		m.Topic, seqFrame, m.Payload = frames[0], frames[1], frames[2]
	default:
		return Message{}, false, fmt.Errorf("%w: replay reply has %d frames after the delimiter, want 2 or 3", ErrFrames, len(frames))
	}
	if m.Seq, err = ParseSeq(seqFrame); err != nil {
		return Message{}, false, err
	}
	return m, m.Seq == EndSeq, nil
}

// ReplayRequest is what a DEALER sends to ask for every buffered batch with
// seq >= start: the empty delimiter a REQ socket would add, then the seq.
func ReplayRequest(start uint64) [][]byte { return [][]byte{{}, SeqFrame(start)} }
