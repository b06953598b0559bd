package bench

import (
	"net/netip"
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
