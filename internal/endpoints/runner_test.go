package endpoints

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// heldChecker is kube-proxy answering only when the test says: each check
// reports its address on asked and then waits for a verdict on answer or
// for its context to end (Unknown), reporting that on cancelled.
type heldChecker struct {
	asked     chan netip.AddrPort
	answer    chan Verdict
	cancelled chan netip.AddrPort
}

func newHeldChecker() heldChecker {
	return heldChecker{asked: make(chan netip.AddrPort, 16), answer: make(chan Verdict), cancelled: make(chan netip.AddrPort, 16)}
}

func (h heldChecker) Check(ctx context.Context, addr netip.AddrPort) Verdict {
	h.asked <- addr
	select {
	case v := <-h.answer:
		return v
	case <-ctx.Done():
		h.cancelled <- addr
		return Unknown
	}
}

func nodeAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}), 30000)
}

func keyOf(i int) Key { return Key{"ns/web", fmt.Sprintf("node-%d", i)} }

// recv returns the next value of c, failing after a minute.
func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatal("nothing came")
		var zero T
		return zero
	}
}

// Checks beyond the free slots wait as data: nothing asks for them until a
// slot frees; beyond the queue a check is refused.
func TestRunnerQueuesBeyondItsSlots(t *testing.T) {
	h := newHeldChecker()
	out := make(chan Result, 8)
	r := NewRunner(context.Background(), h, out, 2, 3)
	for i := 1; i <= 5; i++ {
		assert.Assert(t, r.Start(keyOf(i), uint64(i), nodeAddr(i)), "check %d", i)
	}
	assert.Assert(t, !r.Start(keyOf(6), 6, nodeAddr(6)), "the queue is full")
	first := map[netip.AddrPort]bool{recv(t, h.asked): true, recv(t, h.asked): true}
	assert.DeepEqual(t, first, map[netip.AddrPort]bool{nodeAddr(1): true, nodeAddr(2): true})
	running, waiting := r.InFlight()
	assert.Equal(t, running, 2)
	assert.Equal(t, waiting, 3)
	assert.Equal(t, len(h.asked), 0, "no third check before a slot frees")

	h.answer <- Delivers
	res := recv(t, out)
	assert.Equal(t, res.Verdict, Delivers)
	r.Finished(res)
	assert.Equal(t, recv(t, h.asked), nodeAddr(3), "the next in line")
	running, waiting = r.InFlight()
	assert.Equal(t, running, 2)
	assert.Equal(t, waiting, 2)
}

// A check whose node was swept is cancelled: running, its context ends and
// its slot goes to the next; waiting, it is never made.
func TestRunnerCancelsSweptChecks(t *testing.T) {
	h := newHeldChecker()
	out := make(chan Result, 8)
	r := NewRunner(context.Background(), h, out, 1, 4)
	for i := 1; i <= 3; i++ {
		assert.Assert(t, r.Start(keyOf(i), uint64(i), nodeAddr(i)))
	}
	assert.Equal(t, recv(t, h.asked), nodeAddr(1))
	r.Cancel([]Key{keyOf(1), keyOf(2)})
	assert.Equal(t, recv(t, h.cancelled), nodeAddr(1))
	assert.Equal(t, recv(t, h.asked), nodeAddr(3), "node-2's check is never made")
	running, waiting := r.InFlight()
	assert.Equal(t, running, 1)
	assert.Equal(t, waiting, 0)
}
