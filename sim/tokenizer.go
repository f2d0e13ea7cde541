package sim

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The simulated engines' tokenizer. A real tokenizer is not needed to route or to
// time requests; what the router relies on is that text maps to token ids
// deterministically and that a conversation's next turn, rendered by the chat
// template, starts with the previous turn's tokens, so that prefix caching works on
// text exactly as it does on token ids. This tokenizer guarantees both, and gives
// token counts of the order of a BPE tokenizer's (3 to 4 characters per token on
// English text) so that text prompts load the engines realistically.
//
// Pieces: a text is cut into pieces, each one token:
//   - a run of letters and digits, with the one space before it if there is one, is
//     cut greedily into pieces of at most tokenizerWordRunes letters and digits from
//     its start (as BPE vocabularies hold " the", the space rides on the first);
//   - every other rune is a piece of its own (spaces not followed by a word,
//     punctuation, newlines).
//
// Each piece's id is a hash of its bytes modulo the vocabulary. Prefix stability
// follows from the cut rule: where a piece ends depends only on the text before it
// and on whether the next rune is a letter or digit. So the tokens of any prefix of a
// text are a prefix of the text's tokens unless the cut falls inside a piece (the
// text goes on with a letter or digit after a letter, digit or space); then they
// share all of the text's tokens but the prefix's last one. Chat messages end with a
// newline in the template, so each turn ends where no piece is cut.
//
// Generated tokens are ids, not text; their text (tokenText) is a word from a fixed
// list chosen by the id, with a leading space. Re-tokenizing that text does not give
// the same ids back (a real tokenizer mostly would), so an assistant reply resent as
// text in the next turn is computed again rather than hit in the cache. The prompt
// before it still hits.

// tokenizerWordRunes is the longest piece a run of letters and digits is cut into.
const tokenizerWordRunes = 4

// Tokenize returns the token ids of text.
func Tokenize(text string, vocab int) []uint32 {
	out := make([]uint32, 0, len(text)/3+1)
	i := 0
	for i < len(text) {
		r, n := utf8.DecodeRuneInString(text[i:])
		j := i
		if r == ' ' {
			if next, _ := utf8.DecodeRuneInString(text[i+1:]); isWordRune(next) {
				j++ // the space leads the word's first piece
				r = next
			}
		}
		if !isWordRune(r) {
			out = append(out, pieceID(text[i:i+n], vocab))
			i += n
			continue
		}
		runes := 0
		for j < len(text) && runes < tokenizerWordRunes {
			r, n := utf8.DecodeRuneInString(text[j:])
			if !isWordRune(r) {
				break
			}
			j += n
			runes++
		}
		out = append(out, pieceID(text[i:j], vocab))
		i = j
	}
	return out
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// pieceID is the FNV-1a hash of a piece, mixed, modulo the vocabulary.
func pieceID(piece string, vocab int) uint32 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(piece); i++ {
		h = (h ^ uint64(piece[i])) * 1099511628211
	}
	return uint32(mix64(h) % uint64(max(vocab, 1)))
}

// outputWords are the texts of generated tokens: common English words, so that a
// completion reads as (meaningless) prose and is valid UTF-8.
var outputWords = [...]string{
	"the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
	"not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
	"their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who", "so",
	"no", "model", "token", "cache", "block", "prefill", "decode", "router", "engine", "request", "time", "first", "next", "last", "fast", "slow",
}

// tokenText is the text of a generated token id.
func tokenText(id uint32) string { return " " + outputWords[id%uint32(len(outputWords))] }

// tokensText is the text of generated token ids.
func tokensText(ids []uint32) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(tokenText(id))
	}
	return b.String()
}

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role    string
	Content string
}

// RenderChat renders messages with the simulated model's chat template: each message
// is "<|role|>\n" + content + "\n", and a generation prompt appends "<|assistant|>\n".
// Each message's rendering depends on that message alone, so a conversation's next
// turn extends the previous turn's text, and (each message ending in a newline) its
// tokens.
func RenderChat(msgs []ChatMessage, addGenerationPrompt bool) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>\n")
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	if addGenerationPrompt {
		b.WriteString("<|assistant|>\n")
	}
	return b.String()
}
