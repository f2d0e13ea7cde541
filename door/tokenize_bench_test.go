package door

import (
	"context"
	"strconv"
	"testing"

	"github.com/pdrouter/pdrouter/door/doortest"
)

// BenchmarkTokenize: what getting a text prompt's token ids costs the door,
// over real HTTP to an engine's /tokenize (miss) and from the cache (hit).
func BenchmarkTokenize(b *testing.B) {
	eng := doortest.New(b, "d")
	d, err := New(Deps{Decider: &fakeDecider{}, Fleet: fakeFleet{}, Outcomes: &fakeOutcomes{}})
	if err != nil {
		b.Fatal(err)
	}
	prompt := `"the quick brown fox jumps over the lazy dog, again and again and again"`
	b.Run("miss", func(b *testing.B) {
		for i := range b.N {
			r := &request{model: "m" + strconv.Itoa(i), prompt: []byte(prompt)}
			if _, f := d.tokens(context.Background(), eng.URL(), r); f != nil {
				b.Fatal(f)
			}
		}
	})
	b.Run("hit", func(b *testing.B) {
		r := &request{model: "m", prompt: []byte(prompt)}
		if _, f := d.tokens(context.Background(), eng.URL(), r); f != nil {
			b.Fatal(f)
		}
		b.ResetTimer()
		for range b.N {
			if _, f := d.tokens(context.Background(), eng.URL(), r); f != nil {
				b.Fatal(f)
			}
		}
	})
}
