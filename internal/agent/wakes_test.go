package agent

import (
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// The IPs whose time came are handed over in time order, each once, at
// its earliest time; a forgotten IP is not; min is the earliest time left.
func TestIPWakesDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := newIPWakes()
	w.set(testIP(1), at(30))
	w.set(testIP(2), at(10))
	w.set(testIP(3), at(20))
	w.set(testIP(1), at(5))  // earlier: taken
	w.set(testIP(3), at(40)) // later: ignored
	w.set(testIP(4), at(15))
	w.forget(testIP(4))
	w.set(testIP(5), at(50))
	assert.Equal(t, w.min, at(5))

	var got []string
	take := func(ip netip.Addr) { got = append(got, ip.String()) }
	w.due(at(20), take)
	assert.DeepEqual(t, got, []string{testIP(1).String(), testIP(2).String(), testIP(3).String()})
	assert.Equal(t, w.min, at(50))

	got = nil
	w.due(at(49), take)
	assert.Equal(t, len(got), 0)
	w.due(at(50), take)
	assert.DeepEqual(t, got, []string{testIP(5).String()})
	assert.Equal(t, w.min, time.Time{})
	assert.Equal(t, len(w.at), 0)
}

// IPs decided before their time leave stale entries behind; the heap is
// made again before they outnumber the IPs waiting by much.
func TestIPWakesHeapStaysBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := newIPWakes()
	for i := range 10000 {
		ip := testIP(i % 100)
		w.set(ip, t0.Add(time.Duration(10000-i)*time.Millisecond))
		if i%2 == 0 {
			w.forget(ip)
		}
	}
	assert.Assert(t, len(w.heap) <= 2*len(w.at)+shrinkBelow, "%d entries for %d IPs", len(w.heap), len(w.at))
	n := 0
	w.due(t0.Add(time.Hour), func(netip.Addr) { n++ })
	assert.Equal(t, n, 50)
}
