package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// LogCounts are what one eipd's log says it did over a scale run, besides
// holding its IPs: in a scale run nothing should move.
type LogCounts struct {
	// Unheard counts the times a peer reported this node unheard over
	// the LAN, each making it hand its IPs to its peers.
	Unheard int `json:"unheard"`
	// Unbound counts the IPs it unbound.
	Unbound int `json:"unbound"`
	// Stalls counts ticks so late that the loop re-read every lock.
	Stalls int `json:"stalls"`
	// Silent counts the times its liveness datagrams stopped because its
	// loop made no progress.
	Silent int `json:"silent"`
}

// The messages counted, as eipd logs them (slog's text format).
var logCounted = []struct {
	msg   string
	count func(*LogCounts)
}{
	{`msg="a peer no longer hears this node over the LAN`, func(c *LogCounts) { c.Unheard++ }},
	{` msg=unbound `, func(c *LogCounts) { c.Unbound++ }},
	{`msg="the loop stalled`, func(c *LogCounts) { c.Stalls++ }},
	{`msg="the owner loop has made no progress; liveness datagrams stop`, func(c *LogCounts) { c.Silent++ }},
}

// logMark is where a daemon's log ends now: countLog reads from there.
func logMark(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// countLog counts the lines of logCounted in the log at path from offset.
func countLog(path string, offset int64) (LogCounts, error) {
	var c LogCounts
	err := scanLog(path, offset, func(line string) {
		for _, m := range logCounted {
			if strings.Contains(line, m.msg) {
				m.count(&c)
			}
		}
	})
	return c, err
}

// scanLog hands each line of the log at path from offset to line.
func scanLog(path string, offset int64, line func(string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line(sc.Text())
	}
	return sc.Err()
}

// explainedRemovals is how many removals a scale run explains: the first
// few say why, the rest would only repeat it.
const explainedRemovals = 3

// linesPerRemoval is how many of eipd's lines about an IP an explanation
// quotes: the last ones before the removal.
const linesPerRemoval = 4

// explainRemovals says, for the first explainedRemovals of removed, when
// the IP left its node, counted from t0, where it was bound after, and
// the last lines the node's eipd logged about it before then (its log at
// logOf, from the offset marks holds), so that a run whose addresses
// vanished says why wherever it ran.
func explainRemovals(removed []removal, t0 time.Time, logOf func(node string) string, marks map[string]int64) []string {
	var out []string
	for _, r := range removed[:min(len(removed), explainedRemovals)] {
		text := fmt.Sprintf("%s left %s at +%.1fs (bound at +%.1fs), then bound on %s", r.IP, r.Node,
			r.To.Sub(t0).Seconds(), r.From.Sub(t0).Seconds(), orNone(r.After))
		var lines []string
		mark := " ip=" + r.IP.String() + " "
		err := scanLog(logOf(r.Node), marks[r.Node], func(line string) {
			if strings.Contains(line+" ", mark) && logTime(line).Before(r.To.Add(time.Second)) {
				lines = append(lines, line)
			}
		})
		if err != nil {
			text += fmt.Sprintf("; its log: %v", err)
		}
		for _, l := range lines[max(0, len(lines)-linesPerRemoval):] {
			text += "\n    " + l
		}
		out = append(out, text)
	}
	return out
}

// logTime is when eipd logged line (slog's text format); zero if it
// does not say.
func logTime(line string) time.Time {
	rest, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}
	}
	stamp, _, _ := strings.Cut(rest, " ")
	t, _ := time.Parse(time.RFC3339Nano, stamp)
	return t
}

func orNone(nodes []string) string {
	if len(nodes) == 0 {
		return "no node"
	}
	return strings.Join(nodes, ", ")
}
