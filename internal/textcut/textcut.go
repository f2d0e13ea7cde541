// Package textcut shortens text that quotes input — an error message, a
// JSON path, a broker's reason — so that what pdrouter writes never grows
// with what a peer sent.
package textcut

import "unicode/utf8"

// Ellipsis marks a cut.
const Ellipsis = "…"

// Truncate returns s if it is at most n bytes, else its longest prefix that
// ends on a rune boundary and leaves room for Ellipsis, with Ellipsis
// appended: at most n bytes (for n ≥ len(Ellipsis)), and valid UTF-8
// whenever s is.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len(Ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis
}
