package agent

import (
	"net/netip"
	"testing"

	"gotest.tools/v3/assert"
)

// walk returns the IPs that wait with first, in the queue's order.
func walk(q *waitQueue, first bool) []int {
	var out []int
	end := q.start()
	for i := 0; ; {
		ip, after, ok := q.next(i, end, first)
		if !ok {
			return out
		}
		out = append(out, int(ip.As4()[3]))
		i = after
	}
}

// The waiting acquisitions leave in the order they were decided, one that
// waits again goes to the back, and one that leaves is skipped, however
// many come and go.
func TestWaitQueueKeepsTheOrderDecided(t *testing.T) {
	q := newWaitQueue()
	ip := func(n int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(n)}) }
	for _, n := range []int{5, 1, 4, 2, 3} {
		q.add(ip(n), n%2 == 1)
	}
	assert.DeepEqual(t, walk(&q, true), []int{5, 1, 3})
	assert.DeepEqual(t, walk(&q, false), []int{4, 2})
	assert.Equal(t, q.firstWaiting(), 3)

	q.add(ip(5), false) // decided again: no longer first, at the back
	q.remove(ip(4))
	assert.DeepEqual(t, walk(&q, true), []int{1, 3})
	assert.DeepEqual(t, walk(&q, false), []int{2, 5})
	assert.Equal(t, q.firstWaiting(), 2)

	// IPs queued during a walk are past its end.
	end := q.start()
	q.add(ip(9), true)
	got, _, ok := q.next(0, end, true)
	assert.Assert(t, ok)
	assert.Equal(t, got, ip(1))

	for range 1000 { // stale slots are compacted away
		q.add(ip(7), true)
		q.remove(ip(7))
	}
	q.start()
	assert.Assert(t, len(q.order) <= 2*len(q.at)+64, "%d slots for %d IPs", len(q.order), len(q.at))
	assert.DeepEqual(t, walk(&q, true), []int{1, 3, 9})

	q.reset()
	assert.DeepEqual(t, walk(&q, true), []int(nil))
	assert.Equal(t, q.firstWaiting(), 0)
}
