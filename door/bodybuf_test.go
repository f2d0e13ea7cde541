package door

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pdrouter/pdrouter/door/doortest"
)

// TestPooledBodiesStayTheirRequests: with the client's bodies and the engine
// requests in reused buffers, concurrent requests, local and remote,
// streamed and not, each reach the engines with their own prompt, whole.
// Request v's prompt is v repeated promptLen(v) times, so a buffer reused
// while still read shows up as a prompt that is not one value of its
// length. (The race detector does not see it: the pool orders the Put
// before the Get.) Refused requests come between them.
func TestPooledBodiesStayTheirRequests(t *testing.T) {
	const clients, each = 8, 24
	p, d := doortest.New(t, "p"), doortest.New(t, "d")
	plan := make([]Decision, clients*each)
	for i := range plan {
		plan[i] = local(d)
		if i%2 == 1 {
			plan[i] = remote(p, d)
		}
	}
	r := newRig(t, plan, nil)
	promptLen := func(v int) int { return 16 + v%97 }
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				v := c*each + i
				ids := strings.TrimSuffix(strings.Repeat(fmt.Sprint(v)+",", promptLen(v)), ",")
				body := fmt.Sprintf(`{"model":"m","prompt":[%s],"max_tokens":%d,"stream":%t}`, ids, 1+v%7, v%3 == 0)
				if resp, b := r.post("/v1/completions", body); resp.StatusCode != 200 {
					t.Errorf("request %d: %d %s", v, resp.StatusCode, b)
				}
				// A request refused for its prompt, after its body was
				// parsed: its buffer goes back to the pool once, not twice
				// (twice, two later requests would share it).
				if resp, b := r.post("/v1/completions", `{"model":"m","prompt":[-1]}`); resp.StatusCode != 400 {
					t.Errorf("a negative token id: %d %s", resp.StatusCode, b)
				}
			}
		})
	}
	wg.Wait()
	seen := map[int]int{}
	for _, e := range []*doortest.Engine{p, d} {
		for _, req := range e.Requests() {
			prompt, _ := req["prompt"].([]any)
			if len(prompt) == 0 {
				t.Fatalf("%s got a request without a prompt: %v", e.ID, req)
			}
			v := int(prompt[0].(float64))
			for _, x := range prompt {
				if int(x.(float64)) != v {
					t.Fatalf("%s got a prompt mixing requests: %v", e.ID, prompt)
				}
			}
			if len(prompt) != promptLen(v) {
				t.Fatalf("%s got request %d's prompt with %d ids, want %d", e.ID, v, len(prompt), promptLen(v))
			}
			if e == d {
				seen[v]++
			}
		}
	}
	for v := range clients * each {
		if seen[v] != 1 {
			t.Fatalf("request %d reached the decode engine %d times, want once", v, seen[v])
		}
	}
	if n := len(p.Requests()); n != clients*each/2 {
		t.Fatalf("%d prefill legs, want %d", n, clients*each/2)
	}
}
