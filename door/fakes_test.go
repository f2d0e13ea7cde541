package door

import (
	"context"
	"fmt"
	"sync"
)

// fakeDecider answers decisions from a list, in turn, and records the
// requests.
type fakeDecider struct {
	mu    sync.Mutex
	plan  []Decision
	got   []DecideRequest
	calls int
}

func (f *fakeDecider) Decide(_ context.Context, r DecideRequest) (Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, r)
	d := f.plan[min(f.calls, len(f.plan)-1)]
	f.calls++
	d.RequestID = r.RequestID
	d.DecisionID = fmt.Sprintf("dec-%d", f.calls)
	return d, nil
}

type fakeFleet struct{ urls []string }

func (f fakeFleet) Tokenizers(string) []string { return f.urls }
func (f fakeFleet) Models() []string           { return []string{"m"} }

type fakeOutcomes struct {
	mu  sync.Mutex
	got []Outcome
}

func (f *fakeOutcomes) AppendOutcome(_ context.Context, o Outcome) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, o)
	return nil
}

func (f *fakeOutcomes) list() []Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Outcome(nil), f.got...)
}
