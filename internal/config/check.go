package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a configuration, as `kubectl eip config
// check` prints it: the key, the line within a multi-line value (ranges,
// bgp-peers; 0 for the others), what is wrong and how to fix it.
type Problem struct {
	Key  string
	Line int
	// Message is the parser's sentence, the key and value included.
	Message string
	// Fix is the advice the sentence ends with, or a pointer to the key's
	// documentation when it has none.
	Fix string
}

// What is the message without the fix it ends with, if it ends with it.
func (p Problem) What() string {
	if w, ok := strings.CutSuffix(p.Message, p.Fix); ok {
		return strings.TrimRight(w, ":; ")
	}
	return p.Message
}

// Check judges data as eipd does (Parse) and returns every problem: each
// error of Parse, and each key Parse does not know, which eipd ignores but
// the admission policy refuses. Warnings are the other, harmless findings
// (a value with no effect).
func Check(data map[string]string) (problems []Problem, warnings []string) {
	cfg, err := Parse(data)
	for _, e := range leaves(err) {
		problems = append(problems, problemOf(e.Error()))
	}
	known := Keys()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		if !slices.Contains(known, k) {
			fix := "remove it"
			if s := suggest(k, known); s != "" {
				fix = fmt.Sprintf("did you mean %q?", s)
			}
			problems = append(problems, Problem{Key: k, Message: fmt.Sprintf("unknown key %q: eipd ignores it", k), Fix: fix})
		}
	}
	for _, w := range cfg.Warnings {
		if !strings.HasPrefix(w, "unknown key ") {
			warnings = append(warnings, w)
		}
	}
	return problems, warnings
}

// leaves flattens the errors joined by Parse (errors.Join, nested), keeping
// each sentence whole.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}

// problemOf reads the key and line a parser sentence starts with ("ranges
// line 3 ...", "policy ...", "preferred-nodes: ...") and the advice it ends
// with.
func problemOf(msg string) Problem {
	p := Problem{Message: msg}
	for _, k := range Keys() {
		if strings.HasPrefix(msg, k+" ") || strings.HasPrefix(msg, k+":") {
			if len(k) > len(p.Key) {
				p.Key = k
			}
		}
	}
	if rest, ok := strings.CutPrefix(msg, p.Key+" line "); ok {
		digits, _, _ := strings.Cut(rest, " ")
		p.Line, _ = strconv.Atoi(digits)
	}
	p.Fix = fixOf(msg)
	if p.Fix == "" {
		p.Fix = "see " + p.Key + " in docs/configuration.md"
	}
	return p
}

// fixOf returns the advice at the end of a parser sentence: what follows
// ": use", ": write", ": set", "; write", "did you mean" and the like.
func fixOf(msg string) string {
	best := -1
	for _, mark := range []string{": use ", ": write ", ": set ", "; write ", ": start ", ": leave ", "did you mean ", ": give ", "give either "} {
		if i := strings.Index(msg, mark); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return strings.TrimLeft(msg[best:], ":; ")
}
