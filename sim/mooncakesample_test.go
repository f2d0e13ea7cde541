package sim

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"testing"
)

var writeMooncakeSample = flag.Bool("write-mooncake-sample", false, "rewrite "+mooncakeSample+" from genMooncakeSample")

// mooncakeSample is a small trace in the Mooncake JSONL format that genMooncakeSample
// makes. The tests that replay a Mooncake trace read it, so they need no file from
// outside the repository; the published trace can be given through realTraceEnv.
const mooncakeSample = "../testdata/mooncake/sample.jsonl"

// The sample's shape. The figures are ours, picked so that the default 2P2D fleet is
// loaded heavily but not hopelessly (where the local/remote choice matters) and so that
// the file stays small; they are not measured from any published trace. Lengths are
// tokens, times milliseconds.
const (
	sampleSeed        = 1
	sampleRequests    = 300
	sampleStartMean   = 90 // mean gap between conversation starts (Poisson-ish)
	sampleSystems     = 6  // shared system prompts, of sampleSystemMin..Max tokens
	sampleSystemMin   = 600
	sampleSystemMax   = 3000
	sampleNoSystemPct = 20   // % of conversations without a system prompt
	sampleDocPct      = 35   // % of conversations that open with a document
	sampleDocMin      = 2000 // a document is sampleDocMin + about sampleDocExtra tokens
	sampleDocExtra    = 8000
	sampleMessageMean = 300 // any other message
	sampleOutputMean  = 200
	sampleMoreTurnPct = 75 // % chance of one more turn, up to sampleMaxTurns
	sampleMaxTurns    = 10
	sampleMaxContext  = 32768 // a conversation ends before its prompt would exceed it
	sampleThinkMean   = 1500  // mean pause between an answer and the next turn
	sampleMsPerOutput = 20    // service-time estimate per output token
)

// sampleRand is splitmix64 over the package's mix64. The sample must come out the same
// on every Go release and architecture, so the generator uses only integer arithmetic
// and no library generator whose algorithm might change.
type sampleRand struct{ state uint64 }

func (r *sampleRand) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	return mix64(r.state)
}

// pct is true with probability p/100.
func (r *sampleRand) pct(p int) bool { return r.next()%100 < uint64(p) }

// uniform is in [lo, hi].
func (r *sampleRand) uniform(lo, hi int) int { return lo + int(r.next()%uint64(hi-lo+1)) }

// geometric is a memoryless length of about mean, counted in steps of unit: the
// integer stand-in for an exponential draw.
func (r *sampleRand) geometric(mean, unit int) int {
	k, n := uint64(max(mean/unit, 1)), 0
	for r.next()%k != 0 {
		n++
	}
	return n * unit
}

// sampleLine is one request of the sample; blocks are generator-internal keys that
// become hash_ids when the trace is written.
type sampleLine struct {
	conv, turn    int
	timestamp     int // ms
	input, output int
	blocks        []uint64
}

// genMooncakeSample makes the sample: conversations start as a Poisson-ish process;
// each opens with one of a few shared system prompts (or none) and a short message or a
// document, and each next turn resends the whole history (previous prompt, previous
// answer) plus a new message. As in the Mooncake format a hash id stands for the content
// of one 512-token block of the prompt, so a turn repeats the ids of its previous turn's
// complete blocks, and conversations with the same system prompt share its complete
// blocks; a block that is only partly the same gets a new id.
func genMooncakeSample() []sampleLine {
	r := &sampleRand{state: sampleSeed}
	next := uint64(0)
	fresh := func() uint64 { next++; return next }
	systems := make([][]uint64, sampleSystems)
	systemLen := make([]int, sampleSystems)
	for i := range systems {
		systemLen[i] = r.uniform(sampleSystemMin, sampleSystemMax)
		for range systemLen[i] / MooncakeBlockTokens {
			systems[i] = append(systems[i], fresh())
		}
	}
	var lines []sampleLine
	// Conversations are generated in start order until sampleRequests requests arrive
	// before the latest start: no later conversation can add one before that.
	for conv, start := 0, 0; ; conv++ {
		start += 1 + r.geometric(sampleStartMean, 10)
		if arrivedBefore(lines, start) >= sampleRequests {
			break
		}
		// The conversation so far: plen tokens, whose first complete blocks are known
		// by the keys in prompt (its last partial block, if any, changes as it grows).
		var prompt []uint64
		plen := 0
		if !r.pct(sampleNoSystemPct) {
			s := r.uniform(0, sampleSystems-1)
			prompt, plen = systems[s], systemLen[s]
		}
		at := start
		for turn := 0; turn < sampleMaxTurns; turn++ {
			msg := 1 + r.geometric(sampleMessageMean, 4)
			if turn == 0 && r.pct(sampleDocPct) {
				msg = sampleDocMin + r.geometric(sampleDocExtra, 64)
			}
			out := 1 + r.geometric(sampleOutputMean, 2)
			input := plen + msg
			if input > sampleMaxContext {
				break
			}
			blocks := slices.Clone(prompt)
			for len(blocks)*MooncakeBlockTokens < input {
				blocks = append(blocks, fresh())
			}
			lines = append(lines, sampleLine{conv: conv, turn: turn, timestamp: at,
				input: input, output: out, blocks: blocks})
			// The next turn resends this prompt and its answer: this prompt's complete
			// blocks stay, its last partial block grows and changes.
			prompt, plen = blocks[:input/MooncakeBlockTokens], input+out
			at += out*sampleMsPerOutput + 1 + r.geometric(sampleThinkMean, 10)
			if !r.pct(sampleMoreTurnPct) {
				break
			}
		}
	}
	slices.SortStableFunc(lines, func(a, b sampleLine) int { return a.timestamp - b.timestamp })
	return lines[:sampleRequests]
}

// arrivedBefore counts the lines with a timestamp before t.
func arrivedBefore(lines []sampleLine, t int) int {
	n := 0
	for _, l := range lines {
		if l.timestamp < t {
			n++
		}
	}
	return n
}

// formatMooncake writes lines as Mooncake JSONL. Hash ids are numbered in order of
// first appearance, so the file reads like the published traces.
func formatMooncake(lines []sampleLine) []byte {
	w := NewMooncakeWriter()
	var b []byte
	for _, l := range lines {
		b = w.AppendLine(b, int64(l.timestamp), l.input, l.output, l.blocks)
	}
	return b
}

// TestMooncakeSampleReproducible: the committed sample is exactly what the generator
// makes, so it can be regenerated and reviewed as code.
// Rewrite it with: go test ./sim -run TestMooncakeSampleReproducible -write-mooncake-sample
func TestMooncakeSampleReproducible(t *testing.T) {
	want := formatMooncake(genMooncakeSample())
	if !bytes.Equal(want, formatMooncake(genMooncakeSample())) {
		t.Fatal("two runs of the generator differ")
	}
	if *writeMooncakeSample {
		if err := os.WriteFile(mooncakeSample, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(mooncakeSample)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s (%d bytes) is not what genMooncakeSample makes (%d bytes); rewrite it with -write-mooncake-sample", mooncakeSample, len(got), len(want))
	}
	if len(got) >= 100<<10 {
		t.Errorf("the sample is %d bytes; keep it under 100 KB", len(got))
	}
}

// TestMooncakeSampleConversations checks, on the committed file, what the generator
// promises: sampleRequests lines in arrival order, one hash id per started 512-token
// block, ids numbered in order of first appearance with a request's new ids after the
// ones it repeats, turns of a conversation in order and each repeating exactly the ids
// of its previous turn's complete blocks, multi-turn conversations, and system prompts
// shared across conversations.
func TestMooncakeSampleConversations(t *testing.T) {
	raw, err := os.ReadFile(mooncakeSample)
	if err != nil {
		t.Fatal(err)
	}
	var file []mooncakeLine
	for i, b := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		var l mooncakeLine
		if err := json.Unmarshal(b, &l); err != nil || l.Timestamp == nil || l.InputLength == nil || l.OutputLength == nil {
			t.Fatalf("line %d: %v: %s", i+1, err, b)
		}
		file = append(file, l)
	}
	gen := genMooncakeSample() // the conversation and turn of each line
	if len(file) != sampleRequests || len(gen) != sampleRequests {
		t.Fatalf("%d lines, generator %d, want %d", len(file), len(gen), sampleRequests)
	}
	// Ids are numbered in order of first appearance, and a request's new ids follow
	// the ones it repeats: fresh[i] is where line i's new ids start.
	fresh := make([]int, len(file))
	nextID := uint64(0)
	for i, l := range file {
		fresh[i] = len(l.HashIDs)
		for k, id := range l.HashIDs {
			switch {
			case id == nextID:
				if fresh[i] == len(l.HashIDs) {
					fresh[i] = k
				}
				nextID++
			case id > nextID || fresh[i] < k:
				t.Fatalf("line %d: id %d at %d, next new id %d, new ids from %d", i+1, id, k, nextID, fresh[i])
			}
		}
	}
	last := map[int]int{} // conversation → its latest line so far
	turns := map[int]int{}
	firstID := map[uint64]map[int]bool{} // first hash id → conversations opening with it
	for i, l := range file {
		g := gen[i]
		if i > 0 && *l.Timestamp < *file[i-1].Timestamp {
			t.Errorf("line %d: timestamp %v before %v", i+1, *l.Timestamp, *file[i-1].Timestamp)
		}
		if want := (*l.InputLength + MooncakeBlockTokens - 1) / MooncakeBlockTokens; len(l.HashIDs) != want || *l.OutputLength < 1 {
			t.Errorf("line %d: %d ids for %d tokens (want %d), output %d", i+1, len(l.HashIDs), *l.InputLength, want, *l.OutputLength)
		}
		if g.turn == 0 {
			if firstID[l.HashIDs[0]] == nil {
				firstID[l.HashIDs[0]] = map[int]bool{}
			}
			firstID[l.HashIDs[0]][g.conv] = true
		}
		turns[g.conv]++
		p, seen := last[g.conv]
		last[g.conv] = i
		if !seen {
			continue
		}
		prev, pg := file[p], gen[p]
		if g.turn != pg.turn+1 || *l.Timestamp <= *prev.Timestamp {
			t.Errorf("line %d: turn %d at %v ms follows turn %d at %v ms", i+1, g.turn, *l.Timestamp, pg.turn, *prev.Timestamp)
		}
		if *l.InputLength <= *prev.InputLength+*prev.OutputLength {
			t.Errorf("line %d: %d tokens do not extend the previous turn's %d+%d", i+1, *l.InputLength, *prev.InputLength, *prev.OutputLength)
		}
		// The previous prompt's complete blocks come again; its partial block, grown
		// by the answer, does not.
		keep := *prev.InputLength / MooncakeBlockTokens
		if !slices.Equal(l.HashIDs[:keep], prev.HashIDs[:keep]) {
			t.Errorf("line %d: does not start with the %d ids of line %d", i+1, keep, p+1)
		}
		if fresh[i] != keep {
			t.Errorf("line %d: %d ids seen before, want the %d of line %d's complete blocks", i+1, fresh[i], keep, p+1)
		}
	}
	multi := 0
	for _, n := range turns {
		if n >= 3 {
			multi++
		}
	}
	shared := 0
	for _, convs := range firstID {
		if len(convs) > 1 {
			shared++
		}
	}
	t.Logf("%d conversations, %d with 3 turns or more; %d system prompts shared; %v ms", len(turns), multi, shared, *file[len(file)-1].Timestamp)
	if multi < 20 || shared < 2 {
		t.Errorf("%d conversations of 3 turns or more and %d shared system prompts, want ≥ 20 and ≥ 2", multi, shared)
	}
}
