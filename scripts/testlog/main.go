// Command testlog reads `go test -json` on stdin and prints what a person
// wants in a CI log: the whole output of a test that failed (held back
// until it ends, so parallel tests' lines do not interleave), each
// package's ok/FAIL line, and with -v each test's result line as it ends. With -record it appends
// every test's result to a file of JSON lines, which -summary reads to
// print each tier's wall time and the slowest tests.
//
//	go test -json ./... 2>&1 | testlog -v -tier e2e -record times.jsonl
//	testlog -summary times.jsonl
//
// Lines that are not JSON (build errors on stderr) are printed as they are.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// record is one line of the -record file: a test's result, or with Test
// empty and Package "" a tier's wall time (written by scripts/test.sh).
type record struct {
	Tier    string  `json:"tier"`
	Package string  `json:"package,omitempty"`
	Test    string  `json:"test,omitempty"`
	Action  string  `json:"action"`
	Seconds float64 `json:"seconds"`
}

func main() {
	tier := flag.String("tier", "", "the tier the tests belong to, for -record")
	rec := flag.String("record", "", "append each test's result to this file (JSON lines)")
	summary := flag.String("summary", "", "print the tiers' wall times and the slowest tests recorded in this file, and exit")
	slowest := flag.Int("slowest", 10, "how many of the slowest tests -summary lists")
	verbose := flag.Bool("v", false, "print each top-level test's result line as it ends")
	flag.Parse()
	if *summary != "" {
		if err := printSummary(os.Stdout, *summary, *slowest); err != nil {
			fmt.Fprintln(os.Stderr, "testlog:", err)
			os.Exit(1)
		}
		return
	}
	var out io.Writer = io.Discard
	if *rec != "" {
		f, err := os.OpenFile(*rec, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testlog:", err)
			os.Exit(1)
		}
		defer f.Close()
		out = f
	}
	if err := relay(os.Stdin, os.Stdout, out, *tier, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(1)
	}
}

// relay prints the readable log of the events in r to w and records each
// test's result to rec.
func relay(r io.Reader, w, rec io.Writer, tier string, verbose bool) error {
	held := map[string]*strings.Builder{} // output of running tests, by package and test
	enc := json.NewEncoder(rec)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		key := ev.Package + " " + ev.Test
		switch {
		case ev.Action == "build-output":
			fmt.Fprint(w, ev.Output)
		case ev.Test == "" && ev.Action == "output":
			// The package's own lines: ok/FAIL, TestMain's messages.
			if o := ev.Output; o != "PASS\n" && o != "FAIL\n" && !strings.HasPrefix(o, "=== RUN") {
				fmt.Fprint(w, o)
			}
		case ev.Action == "output":
			b := held[key]
			if b == nil {
				b = &strings.Builder{}
				held[key] = b
			}
			b.WriteString(ev.Output)
		case ev.Test != "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
			b := held[key]
			delete(held, key)
			if ev.Action == "fail" && b != nil {
				fmt.Fprint(w, b.String())
			} else if verbose && !strings.Contains(ev.Test, "/") {
				fmt.Fprintf(w, "--- %s: %s (%.2fs)\n", strings.ToUpper(ev.Action), ev.Test, ev.Elapsed)
			}
			if err := enc.Encode(record{Tier: tier, Package: ev.Package, Test: ev.Test, Action: ev.Action, Seconds: ev.Elapsed}); err != nil {
				return err
			}
		}
	}
	// Tests that never ended (a panic or a timeout killed the binary):
	// their output is what explains it.
	for key, b := range held {
		fmt.Fprintf(w, "=== output of %s, which did not end:\n%s", key, b.String())
	}
	return sc.Err()
}

func printSummary(w io.Writer, path string, n int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var tiers, tests []record
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		switch {
		case r.Test == "" && r.Package == "":
			tiers = append(tiers, r)
		case !strings.Contains(r.Test, "/"): // top-level tests only
			tests = append(tests, r)
		}
	}
	fmt.Fprintln(w, "== timing summary")
	counts := map[string]map[string]int{} // tier → action → top-level tests
	for _, t := range tests {
		if counts[t.Tier] == nil {
			counts[t.Tier] = map[string]int{}
		}
		counts[t.Tier][t.Action]++
	}
	var total float64
	for _, t := range tiers {
		c := counts[t.Tier]
		fmt.Fprintf(w, "  %-36s %10s  %-4s", t.Tier, dur(t.Seconds), t.Action)
		if c != nil {
			fmt.Fprintf(w, "  tests: %d passed, %d failed, %d skipped", c["pass"], c["fail"], c["skip"])
		}
		fmt.Fprintln(w)
		total += t.Seconds
	}
	fmt.Fprintf(w, "  %-36s %10s\n", "all tiers", dur(total))
	sort.SliceStable(tests, func(i, j int) bool { return tests[i].Seconds > tests[j].Seconds })
	if len(tests) > n {
		tests = tests[:n]
	}
	fmt.Fprintf(w, "  the %d slowest tests:\n", len(tests))
	for _, t := range tests {
		fmt.Fprintf(w, "  %10s  %-4s %s %s\n", dur(t.Seconds), t.Action, t.Package, t.Test)
	}
	return nil
}

func dur(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}
