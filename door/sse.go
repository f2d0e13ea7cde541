package door

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/pdrouter/pdrouter/internal/textcut"
)

// An engine's event stream is input like any other: a line longer than the
// bound, or a chunk that is not an OpenAI chunk, ends the stream with a
// precise error instead of growing a buffer or relaying garbage to the
// client.

// errLineTooLong: an event-stream line past --door-max-upstream-line-bytes.
var errLineTooLong = errors.New("an event-stream line is longer than the limit")

// sseReader reads the data of server-sent events.
type sseReader struct {
	r       *bufio.Reader
	maxLine int
	data    []byte
}

func newSSEReader(r io.Reader, maxLine int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, sseBufSize), maxLine: maxLine}
}

const sseBufSize = 16 << 10

// sseReaders pools the readers of relayed streams: each holds a 16 KiB
// buffer, which every stream would otherwise allocate.
var sseReaders = sync.Pool{New: func() any { return newSSEReader(nil, 0) }}

// getSSEReader is newSSEReader from the pool; putSSEReader returns it
// (its data, grown past the buffer by a long event, is dropped).
func getSSEReader(r io.Reader, maxLine int) *sseReader {
	s := sseReaders.Get().(*sseReader)
	s.r.Reset(r)
	s.maxLine = maxLine
	return s
}

func putSSEReader(s *sseReader) {
	s.r.Reset(nil)
	if cap(s.data) > sseBufSize {
		s.data = nil
	}
	sseReaders.Put(s)
}

// next returns the data of the next event (its data lines joined by "\n"),
// valid until the following call; io.EOF at the end of the stream. An
// event's data is bounded by maxLine as a whole. Comments and the event, id
// and retry fields are skipped: OpenAI streams use data only.
func (s *sseReader) next() ([]byte, error) {
	s.data = s.data[:0]
	have := false
	for {
		line, err := s.line()
		if err != nil {
			if err == io.EOF && have {
				return s.data, nil // the last event, without its blank line
			}
			return nil, err
		}
		switch {
		case len(line) == 0:
			if have {
				return s.data, nil
			}
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("data:")):
			v := line[len("data:"):]
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			if have {
				s.data = append(s.data, '\n')
			}
			if len(s.data)+len(v) > s.maxLine {
				return nil, errLineTooLong
			}
			s.data = append(s.data, v...)
			have = true
		}
	}
}

// line reads one line without its end (\n, \r\n), at most maxLine bytes.
func (s *sseReader) line() ([]byte, error) {
	var long []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(long)+len(frag) > s.maxLine+2 {
			return nil, errLineTooLong
		}
		switch {
		case err == nil && long == nil:
			return trimEOL(frag), nil
		case err == nil:
			return trimEOL(append(long, frag...)), nil
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, frag...)
		case err == io.EOF && len(long)+len(frag) > 0:
			return trimEOL(append(long, frag...)), nil
		default:
			return nil, err
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// chunk is what the door reads of one streamed OpenAI chunk.
type chunk struct {
	// done: the [DONE] sentinel.
	done bool
	// token: a choice carries generated text (text, delta.content or
	// delta.reasoning_content, or tool call deltas).
	token bool
	// usageOnly: the final usage chunk (no choices).
	usageOnly bool
	// completionTokens is usage.completion_tokens, -1 when absent.
	completionTokens int64
	// err is an error event the engine sent mid-stream.
	err *Error
}

type chunkJSON struct {
	Object  string `json:"object"`
	Choices *[]struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content          *string           `json:"content"`
			ReasoningContent *string           `json:"reasoning_content"`
			ToolCalls        []json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens *int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error   json.RawMessage `json:"error"`
	Message *string         `json:"message"`
}

// parseChunk reads one event's data. A chunk is [DONE], an OpenAI chunk
// object (with choices, or the final usage), or an error object (OpenAI's
// {"error":{...}} or vLLM's {"object":"error",...}); anything else is
// refused, saying what it was.
func parseChunk(data []byte) (chunk, error) {
	c := chunk{completionTokens: -1}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		c.done = true
		return c, nil
	}
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return c, fmt.Errorf("chunk is not a JSON object: %q", textcut.Truncate(string(data), 64))
	}
	if fc, ok := scanChunk(data); ok {
		return fc, nil
	}
	return unmarshalChunk(data)
}

// unmarshalChunk reads a chunk through encoding/json: the reference of
// scanChunk, and the reader of every chunk it leaves (errors, refusals,
// unusual spellings), which it then says precisely what is wrong with.
func unmarshalChunk(data []byte) (chunk, error) {
	c := chunk{completionTokens: -1}
	var j chunkJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return c, fmt.Errorf("chunk is not an OpenAI chunk: %s", textcut.Truncate(err.Error(), 128))
	}
	if e := engineError(j.Object, j.Error, j.Message, 0); e != nil {
		c.err = e
		return c, nil
	}
	if j.Choices == nil && j.Usage == nil {
		return c, errors.New("chunk has neither choices nor usage")
	}
	if j.Usage != nil && j.Usage.CompletionTokens != nil {
		if *j.Usage.CompletionTokens < 0 {
			return c, errors.New("chunk's usage.completion_tokens is negative")
		}
		c.completionTokens = *j.Usage.CompletionTokens
	}
	if j.Choices == nil || len(*j.Choices) == 0 {
		c.usageOnly = j.Usage != nil
		return c, nil
	}
	for _, ch := range *j.Choices {
		if ch.Text != nil && *ch.Text != "" {
			c.token = true
		}
		if d := ch.Delta; d != nil && ((d.Content != nil && *d.Content != "") ||
			(d.ReasoningContent != nil && *d.ReasoningContent != "") || len(d.ToolCalls) > 0) {
			c.token = true
		}
	}
	return c, nil
}

// engineError reads an engine's error object: OpenAI's
// {"error":{"message",...}} or vLLM's {"object":"error","message",...}.
// nil when there is none. status is the HTTP status it came with (0 in a
// stream).
func engineError(object string, errField json.RawMessage, message *string, status int) *Error {
	msg := ""
	switch {
	case len(errField) > 0 && string(errField) != "null":
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(errField, &e) != nil || e.Message == "" {
			e.Message = textcut.Truncate(string(errField), 256)
		}
		msg = e.Message
	case object == "error":
		if message != nil {
			msg = *message
		}
	default:
		return nil
	}
	if status == 0 {
		status = 502
	}
	return &Error{Status: status, Type: typeServer, Code: "upstream_error", Message: "the engine answered an error: " + textcut.Truncate(msg, 512)}
}
