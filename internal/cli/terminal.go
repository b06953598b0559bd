package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Whoever may write a Lease in eip's namespace, or the ConfigMap, chooses
// text the plugin prints: holders, move targets, a daemon's error, BGP
// session names, values echoed in errors. A terminal acts on control
// characters in it (clear the screen, move the cursor, set the title,
// hide what follows), so nothing the plugin prints carries one: tables and
// messages show each as a Go escape (\x1b, \u009b); json and yaml escape
// them in their own syntax, so that they decode to the very text.

// escapeControls returns s with every control character (C0, DEL, C1) and
// every byte that is not UTF-8 written as a Go escape. Printable text, the
// common case, is returned as is, without allocating.
func escapeControls(s string) string {
	clean := true
	for i := 0; i < len(s) && clean; i++ {
		clean = s[i] >= ' ' && s[i] < utf8.RuneSelf && s[i] != 0x7f
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// escapeJSON escapes, in b written by encoding/json, the control characters
// encoding/json leaves as they are: DEL and C1 (it escapes C0, and writes a
// byte that is not UTF-8 as U+FFFD). Outside strings JSON holds only ASCII
// other than DEL, so every one is inside a string, where \u00XX is the same
// character.
func escapeJSON(b []byte) []byte {
	var out []byte
	done := 0
	for i := 0; i < len(b); {
		r, size := rune(b[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(b[i:])
		}
		if r == 0x7f || (r >= 0x80 && unicode.IsControl(r)) {
			out = append(out, b[done:i]...)
			out = fmt.Appendf(out, `\u%04x`, r)
			done = i + size
		}
		i += size
	}
	if out == nil {
		return b
	}
	return append(out, b[done:]...)
}

// WriteError prints err as kubectl prints errors, "error: " first, each of
// its lines escaped: an error may quote what the cluster holds.
func WriteError(w io.Writer, err error) {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = escapeControls(l)
	}
	fmt.Fprintf(w, "error: %s\n", strings.Join(lines, "\n"))
}
