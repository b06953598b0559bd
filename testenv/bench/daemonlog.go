package bench

import (
	"bufio"
	"io"
	"os"
	"strings"
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
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return c, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		for _, m := range logCounted {
			if strings.Contains(sc.Text(), m.msg) {
				m.count(&c)
			}
		}
	}
	return c, sc.Err()
}
