package sim

import (
	"encoding/json"
	"net/http"
	"time"
)

// genWriter writes a generation's answer in OpenAI's shapes: one JSON object, or a
// text/event-stream of chunks (text_completion, or chat.completion.chunk whose first
// chunk carries the assistant role), a usage chunk when stream_options.include_usage
// asks for it, and [DONE]. The simulated model always generates exactly max_tokens,
// so finish_reason is "length".
type genWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	g       *genRequest
	id      string
	model   string
	created int64
	object  string
	toks    []uint32
	started bool
	// finished: the chunk with finish_reason was sent.
	finished bool
}

func newGenWriter(w http.ResponseWriter, g *genRequest, requestID, model string) *genWriter {
	gw := &genWriter{w: w, rc: http.NewResponseController(w), g: g, model: model, created: time.Now().Unix()}
	switch {
	case g.chat && g.stream:
		gw.id, gw.object = "chatcmpl-"+requestID, "chat.completion.chunk"
	case g.chat:
		gw.id, gw.object = "chatcmpl-"+requestID, "chat.completion"
	default:
		gw.id, gw.object = "cmpl-"+requestID, "text_completion"
	}
	return gw
}

var finishLength = "length"

type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (gw *genWriter) usage(completion, cached int) *usageJSON {
	u := &usageJSON{PromptTokens: len(gw.g.prompt), CompletionTokens: completion, TotalTokens: len(gw.g.prompt) + completion}
	u.PromptTokensDetails.CachedTokens = cached
	return u
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type choiceJSON struct {
	Index        int        `json:"index"`
	Text         *string    `json:"text,omitempty"`
	Delta        *chatDelta `json:"delta,omitempty"`
	Message      *chatDelta `json:"message,omitempty"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type answerJSON struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []choiceJSON `json:"choices"`
	Usage   *usageJSON   `json:"usage,omitempty"`
	// KVTransferParams is always present in a non-streamed answer (null unless the
	// request asked for a remote decode), as vLLM's.
	KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
}

type chunkJSON struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []choiceJSON `json:"choices"`
	Usage   *usageJSON   `json:"usage,omitempty"`
}

// choice is one choice carrying text.
func (gw *genWriter) choice(text string, finish *string) choiceJSON {
	c := choiceJSON{FinishReason: finish}
	switch {
	case gw.g.chat && gw.g.stream:
		c.Delta = &chatDelta{Content: &text}
	case gw.g.chat:
		c.Message = &chatDelta{Role: "assistant", Content: &text}
	default:
		c.Text = &text
	}
	return c
}

func (gw *genWriter) startStream() error {
	if gw.started {
		return nil
	}
	gw.started = true
	h := gw.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	gw.w.WriteHeader(http.StatusOK)
	if gw.g.chat {
		empty := ""
		return gw.event(chunkJSON{Choices: []choiceJSON{{Delta: &chatDelta{Role: "assistant", Content: &empty}}}})
	}
	return nil
}

// event writes one SSE data line with chunk c and flushes it.
func (gw *genWriter) event(c chunkJSON) error {
	c.ID, c.Object, c.Created, c.Model = gw.id, gw.object, gw.created, gw.model
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return gw.data(b)
}

func (gw *genWriter) data(b []byte) error {
	if _, err := gw.w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
		return err
	}
	return gw.rc.Flush()
}

// tokens streams generated tokens, one chunk each. The chunk of the last token
// carries the finish reason, as vLLM's does: the max_tokens-th token is the last
// (the simulated model never stops early), whether or not the engine has
// reported the end yet, which it does in an event of its own.
func (gw *genWriter) tokens(toks []uint32, done bool) error {
	if err := gw.startStream(); err != nil {
		return err
	}
	before := len(gw.toks)
	gw.toks = append(gw.toks, toks...)
	for i, t := range toks {
		var fin *string
		if (done && i == len(toks)-1) || before+i+1 == gw.g.maxTokens {
			fin, gw.finished = &finishLength, true
		}
		if err := gw.event(chunkJSON{Choices: []choiceJSON{gw.choice(tokenText(t), fin)}}); err != nil {
			return err
		}
	}
	return nil
}

// buffer collects tokens of a non-streamed answer.
func (gw *genWriter) buffer(toks []uint32) { gw.toks = append(gw.toks, toks...) }

// end completes the answer.
func (gw *genWriter) end(kv *KVTransferParams, cached int) {
	if !gw.g.stream {
		writeJSON(gw.w, http.StatusOK, answerJSON{ID: gw.id, Object: gw.object, Created: gw.created, Model: gw.model,
			Choices: []choiceJSON{gw.choice(tokensText(gw.toks), &finishLength)}, Usage: gw.usage(len(gw.toks), cached), KVTransferParams: kv})
		return
	}
	if gw.startStream() != nil {
		return
	}
	if !gw.finished {
		if gw.event(chunkJSON{Choices: []choiceJSON{gw.choice("", &finishLength)}}) != nil {
			return
		}
	}
	if gw.g.includeUsage {
		if gw.event(chunkJSON{Choices: []choiceJSON{}, Usage: gw.usage(len(gw.toks), cached)}) != nil {
			return
		}
	}
	_ = gw.data([]byte("[DONE]"))
}

// fail ends the answer with an error: an error body if nothing was sent yet, else
// an error event in the stream (as vLLM's server does).
func (gw *genWriter) fail(err error) {
	e := &apiError{status: http.StatusServiceUnavailable, code: "unavailable", msg: err.Error()}
	if !gw.started {
		writeAPIError(gw.w, e)
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": e.msg, "type": "server_error", "param": nil, "code": e.code}})
	_ = gw.data(b)
}
