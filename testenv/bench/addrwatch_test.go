package bench

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestMultiBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		spans []boundSpan
		want  time.Duration
	}{
		{"one node", []boundSpan{{"a", ms(0), ms(100)}}, 0},
		{"clean move", []boundSpan{{"a", ms(0), ms(100)}, {"b", ms(120), ms(300)}}, 0},
		{"touching", []boundSpan{{"a", ms(0), ms(100)}, {"b", ms(100), ms(300)}}, 0},
		{"overlap", []boundSpan{{"a", ms(0), ms(100)}, {"b", ms(60), ms(300)}}, 40 * time.Millisecond},
		{"overlap of one resolution", []boundSpan{{"a", ms(0), ms(100)}, {"b", ms(99), ms(300)}}, time.Millisecond},
		{"within the resolution", []boundSpan{{"a", ms(0), ms(100)}, {"b", ms(100).Add(-29 * time.Microsecond), ms(300)}}, 0},
		{"same node twice is not two nodes", []boundSpan{{"a", ms(0), ms(100)}, {"a", ms(50), ms(150)}}, 0},
		{"three nodes", []boundSpan{{"a", ms(0), ms(100)}, {"b", ms(50), ms(80)}, {"c", ms(70), ms(200)}}, 50 * time.Millisecond},
		{"clipped to the window", []boundSpan{{"a", ms(-100), ms(1000)}, {"b", ms(-50), ms(1000)}}, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, multiBound(tc.spans, ms(0), ms(500)), tc.want)
		})
	}
}

func TestAddrWatchCounts(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2"), netip.MustParseAddr("198.19.0.3")
	now := time.Unix(1000, 0)
	w := &addrWatch{bound: map[string]map[netip.Addr]time.Time{
		"node-1": {a: now, b: now},
		"node-2": {b: now, c: now},
		"node-3": {},
	}}
	bound, twice := w.Counts()
	assert.Equal(t, bound, 3)
	assert.Equal(t, twice, 1)
}

// A removal is explained by when it happened, where the IP went, and the
// last lines the node's eipd logged about that IP before it.
func TestExplainRemovals(t *testing.T) {
	a, b := netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.10")
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := &addrWatch{
		bound: map[string]map[netip.Addr]time.Time{"node-1": {}, "node-2": {a: at(12)}},
		spans: map[netip.Addr][]boundSpan{a: {{"node-1", at(1), at(11.5)}}},
	}
	removed := w.Removed([]netip.Addr{a, b})
	assert.Equal(t, len(removed), 1)
	assert.DeepEqual(t, removed[0].After, []string{"node-2"})

	log := filepath.Join(t.TempDir(), "eipd-node-1.log")
	line := func(s float64, msg, ip string) string {
		return "time=" + at(s).Format(time.RFC3339Nano) + " level=INFO msg=" + msg + " node=node-1 ip=" + ip
	}
	assert.NilError(t, os.WriteFile(log, []byte(strings.Join([]string{
		line(0.5, "before-the-mark", a.String()),
		line(1, "bound", a.String()),
		line(1, "bound", b.String()),
		line(11, "unbound", a.String()),
		line(30, "much-later", a.String()),
	}, "\n")+"\n"), 0o600))
	mark := int64(len(line(0.5, "before-the-mark", a.String())) + 1)
	why := explainRemovals(removed, t0, func(string) string { return log }, map[string]int64{"node-1": mark})
	assert.DeepEqual(t, why, []string{"198.19.0.1 left node-1 at +11.5s (bound at +1.0s), then bound on node-2" +
		"\n    " + line(1, "bound", a.String()) + "\n    " + line(11, "unbound", a.String())})
}
