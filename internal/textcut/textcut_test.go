package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefg…"},
		{"ééééé", 7, "éé…"}, // 2-byte runes: no cut inside one
		{"日本語テキスト", 9, "日本…"},
		{"abc", 0, "…"},
	} {
		if got := Truncate(c.s, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

// TestTruncateProperty: for every cut of a few kinds of text, the result
// is s, or at most n bytes of valid UTF-8 (when s is) ending in the
// ellipsis after a prefix of s.
func TestTruncateProperty(t *testing.T) {
	for _, s := range []string{"", "ascii only", "ééééé", "日本語テキスト", "mixed é 日 x", "\xff\xfe bad bytes", strings.Repeat("x", 300)} {
		for n := 0; n <= len(s)+2; n++ {
			got := Truncate(s, n)
			if len(s) <= n {
				if got != s {
					t.Fatalf("cut %q at %d", s, n)
				}
				continue
			}
			prefix, ok := strings.CutSuffix(got, Ellipsis)
			if !ok || !strings.HasPrefix(s, prefix) {
				t.Fatalf("Truncate(%q, %d) = %q", s, n, got)
			}
			if n >= len(Ellipsis) && len(got) > n {
				t.Fatalf("Truncate(%q, %d) is %d bytes", s, n, len(got))
			}
			if utf8.ValidString(s) && !utf8.ValidString(got) {
				t.Fatalf("Truncate(%q, %d) = %q is not valid UTF-8", s, n, got)
			}
		}
	}
}
