package sim

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkPrefixStable checks the tokenizer's promise for text and every rune-boundary
// prefix of it: a prefix shares all of the text's tokens but its last one, and all of
// them unless the cut falls inside a piece (a letter or digit follows a letter, digit
// or space).
func checkPrefixStable(t *testing.T, text string) {
	full := Tokenize(text, llama8BVocab)
	for i := 0; i <= len(text); i++ {
		if i < len(text) && !utf8.RuneStart(text[i]) {
			continue
		}
		p := Tokenize(text[:i], llama8BVocab)
		if len(p) > len(full) {
			t.Fatalf("%q: prefix %q has %d tokens, the text %d", text, text[:i], len(p), len(full))
		}
		if n := max(len(p)-1, 0); !slices.Equal(p[:n], full[:n]) {
			t.Fatalf("%q: prefix %q shares less than all but its last token", text, text[:i])
		}
		last, _ := utf8.DecodeLastRuneInString(text[:i])
		next, _ := utf8.DecodeRuneInString(text[i:])
		inside := i > 0 && i < len(text) && isWordRune(next) && (isWordRune(last) || last == ' ')
		if !inside && !slices.Equal(p, full[:len(p)]) {
			t.Fatalf("%q: prefix %q ends between pieces but its tokens %v are not a prefix of %v", text, text[:i], p, full)
		}
	}
}

// TestTokenizePrefixStable is a property test over random texts of letters, digits,
// spaces, punctuation and multi-byte runes.
func TestTokenizePrefixStable(t *testing.T) {
	alphabet := []rune("aaabbcdeeefghiklmnooprsstuy0123456789     ,.!?\n\t-éßжж日本語🙂\u0301")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		var b strings.Builder
		for range rng.IntN(60) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		checkPrefixStable(t, b.String())
	}
	if n := len(Tokenize("The quick brown fox jumps over the lazy dog.", llama8BVocab)); n < 9 || n > 15 {
		t.Errorf("a 44-character sentence is %d tokens; want a BPE-like count", n)
	}
	if !slices.Equal(Tokenize("hello world", 10), Tokenize("hello world", 10)) || slices.ContainsFunc(Tokenize("hello world", 10), func(v uint32) bool { return v >= 10 }) {
		t.Error("tokenize is not deterministic or exceeds the vocabulary")
	}
}

// TestChatTemplateExtends: a conversation's next turn, rendered with the template,
// starts with the previous turn's tokens (prompt and generation prompt included, the
// assistant's reply appended).
func TestChatTemplateExtends(t *testing.T) {
	turn1 := []ChatMessage{{"system", "You are terse."}, {"user", "What is KV caching?"}}
	turn2 := append(slices.Clone(turn1), ChatMessage{"assistant", "Reusing attention state."}, ChatMessage{"user", "And prefix caching?"})
	a, b := Tokenize(RenderChat(turn1, true), llama8BVocab), Tokenize(RenderChat(turn2, true), llama8BVocab)
	if len(b) <= len(a) || !slices.Equal(b[:len(a)], a) {
		t.Fatalf("turn 2 (%d tokens) does not start with turn 1 (%d tokens)", len(b), len(a))
	}
}

// FuzzTokenize: the prefix promise holds for any valid UTF-8 text.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "a", "hello world", "日本語のテキスト", "x1y2 z3!", "e\u0301te\u0301"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || len(s) > 256 {
			t.Skip("JSON strings are valid UTF-8; long ones only slow the quadratic check")
		}
		checkPrefixStable(t, s)
	})
}
