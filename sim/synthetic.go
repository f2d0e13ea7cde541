package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// SyntheticConfig shapes a generated workload of sessions. Every session starts with
// one of a few shared system prompts and grows its context turn by turn: each turn's
// prompt is the previous prompt, the previous answer (the tokens the engine generated)
// and a new message. Chats add short user messages (sometimes a long document first);
// agentic sessions add tool outputs after short tool-call answers, many steps in a
// row. So early turns carry large uncached prompts and later turns mostly cached
// ones: the mix conditional disaggregation is for.
//
// Arrivals are open-loop: sessions start as a Poisson process of SessionRate, and a
// session's next turn arrives a think time after the previous one arrived plus an
// estimate of its service time, so the workload is a fixed trace, like Mooncake's.
type SyntheticConfig struct {
	Seed uint64
	// Duration bounds session starts; turns of late sessions may arrive after it.
	Duration time.Duration
	// SessionRate is new sessions per second.
	SessionRate float64
	// AgenticFraction is the share of sessions that are agentic.
	AgenticFraction float64
	// SystemPrompts distinct system prompts of SystemPromptTokens tokens each are
	// shared by all sessions.
	SystemPrompts      int
	SystemPromptTokens int
	// Chats: MinTurns..MaxTurns turns, user messages of mean ChatUserTokens, answers of
	// mean ChatOutputTokens, DocFraction of chats opening with a document of mean
	// DocTokens, ChatThink mean pause between turns.
	ChatMinTurns, ChatMaxTurns int
	ChatUserTokens             int
	ChatOutputTokens           int
	DocFraction                float64
	DocTokens                  int
	ChatThink                  time.Duration
	// Agents: AgentMinSteps..AgentMaxSteps steps, tool outputs of mean AgentToolTokens,
	// answers (tool calls) of mean AgentOutputTokens, AgentThink mean tool latency.
	AgentMinSteps, AgentMaxSteps int
	AgentToolTokens              int
	AgentOutputTokens            int
	AgentThink                   time.Duration
	// MaxContext ends a session whose next prompt would exceed it (the model's context
	// window; Llama-3.1 serves 128 k, vLLM deployments often cap lower).
	MaxContext int
}

// DefaultSynthetic is the default workload of `make run`: about one new session per
// second for two minutes, a third of them agentic.
func DefaultSynthetic() SyntheticConfig {
	return SyntheticConfig{
		Seed: 1, Duration: 2 * time.Minute, SessionRate: 1, AgenticFraction: 0.35,
		SystemPrompts: 4, SystemPromptTokens: 1500,
		ChatMinTurns: 2, ChatMaxTurns: 8, ChatUserTokens: 250, ChatOutputTokens: 300,
		DocFraction: 0.3, DocTokens: 8000, ChatThink: 8 * time.Second,
		AgentMinSteps: 4, AgentMaxSteps: 16, AgentToolTokens: 1200, AgentOutputTokens: 120,
		AgentThink: 1500 * time.Millisecond,
		MaxContext: 64000,
	}
}

// Validate checks the ranges.
func (c SyntheticConfig) Validate() error {
	switch {
	case c.Duration <= 0 || c.SessionRate <= 0:
		return fmt.Errorf("synthetic workload: duration and session rate must be > 0")
	case c.AgenticFraction < 0 || c.AgenticFraction > 1 || c.DocFraction < 0 || c.DocFraction > 1:
		return fmt.Errorf("synthetic workload: fractions must be in [0, 1]")
	case c.SystemPrompts < 1 || c.ChatMinTurns < 1 || c.ChatMaxTurns < c.ChatMinTurns || c.AgentMinSteps < 1 || c.AgentMaxSteps < c.AgentMinSteps:
		return fmt.Errorf("synthetic workload: need ≥ 1 system prompt and min ≤ max turns and steps")
	case c.MaxContext <= c.SystemPromptTokens:
		return fmt.Errorf("synthetic workload: max context %d must exceed the system prompt", c.MaxContext)
	}
	return nil
}

// Synthetic generates the workload. The same config always gives the same workload.
func Synthetic(c SyntheticConfig) (*Workload, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x73796e7468))
	expo := func(mean float64) float64 { return rng.ExpFloat64() * mean }
	length := func(mean int) int { return max(1, int(math.Round(expo(float64(mean))))) }
	w := &Workload{Name: fmt.Sprintf("synthetic(seed=%d)", c.Seed)}
	seg := func(parts ...uint64) uint64 {
		h := c.Seed
		for _, p := range parts {
			h = mix64(h ^ p)
		}
		return h
	}
	// A rough service-time estimate keeps a session's next turn from arriving before
	// its previous answer could have finished: 20 ms per output token.
	const perOutputToken = 20 * time.Millisecond
	for s, start := 0, time.Duration(0); ; s++ {
		start += time.Duration(expo(1/c.SessionRate) * float64(time.Second))
		if start >= c.Duration {
			break
		}
		agentic := rng.Float64() < c.AgenticFraction
		sys := rng.IntN(c.SystemPrompts)
		prompt := []Segment{{Seed: seg(0x737973, uint64(sys)), Len: c.SystemPromptTokens}}
		plen := c.SystemPromptTokens
		kind, turns, think := "chat", c.ChatMinTurns+rng.IntN(c.ChatMaxTurns-c.ChatMinTurns+1), c.ChatThink
		if agentic {
			kind, turns, think = "agent", c.AgentMinSteps+rng.IntN(c.AgentMaxSteps-c.AgentMinSteps+1), c.AgentThink
		}
		at := start
		session := fmt.Sprintf("%s-%04d", kind, s)
		for t := range turns {
			var msg int
			switch {
			case agentic && t == 0:
				msg = length(c.ChatUserTokens) // the task
			case agentic:
				msg = length(c.AgentToolTokens) // the tool's output
			case t == 0 && rng.Float64() < c.DocFraction:
				msg = length(c.DocTokens)
			default:
				msg = length(c.ChatUserTokens)
			}
			out := length(c.ChatOutputTokens)
			if agentic {
				out = length(c.AgentOutputTokens)
			}
			if plen+msg+out > c.MaxContext {
				break
			}
			prompt = append(prompt, Segment{Seed: seg(uint64(s), uint64(t), 0x75736572), Len: msg})
			plen += msg
			req := &Request{
				ID: fmt.Sprintf("%s-t%02d", session, t), Arrival: at, Session: session,
				Prompt: slices.Clone(prompt), PromptLen: plen, OutputLen: out,
				Output: seg(uint64(s), uint64(t), 0x6f7574),
			}
			w.Requests = append(w.Requests, req)
			prompt = append(prompt, Segment{Seed: req.Output, Len: out})
			plen += out
			at += time.Duration(expo(float64(think))) + time.Duration(out)*perOutputToken
		}
	}
	sortByArrival(w.Requests)
	return w, nil
}

// sortByArrival orders requests by arrival, stably, ties by their original order.
func sortByArrival(rs []*Request) {
	slices.SortStableFunc(rs, func(a, b *Request) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
}
