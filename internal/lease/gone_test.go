package lease_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

// goneView is decideView in which the nodes of gone, each since the time
// given, are out of service (their Node deleted or tainted
// node.kubernetes.io/out-of-service), and no longer live.
func goneView(gone map[string]time.Time) func(*lease.View) {
	return func(v *lease.View) {
		v.Gone = func(n string) (time.Time, bool) {
			t, ok := gone[n]
			return t, ok
		}
		var live []string
		for _, n := range v.Live {
			if _, ok := gone[n]; !ok {
				live = append(live, n)
			}
		}
		v.Live = live
		if _, ok := gone[v.Self]; ok {
			v.Eligible = false
		}
	}
}

// A node gone out of service keeps none of its IPs, though its heartbeat
// still says it is alive: its successor takes each at once, the others
// leave it to the successor as after a death, and race for it at once by
// rank when the lock names no successor. A gone node itself unbinds what
// it holds without writing (a hand-off would race the successor's
// takeover) and binds nothing.
func TestDecideGoneNode(t *testing.T) {
	r0, r1 := ipRanked(t, 0), ipRanked(t, 1)
	bGone := goneView(map[string]time.Time{"b": now()})
	bGoneEarlier := goneView(map[string]time.Time{"b": now().Add(-time.Second)})
	aGone := goneView(map[string]time.Time{"a": now()})
	aGoneNotWritable := func(v *lease.View) { aGone(v); v.Writable = false }
	xGone := goneView(map[string]time.Time{"x": now()}) // x died 50 ms ago, gone now
	for _, tc := range []decideCase{
		// b, alive by its heartbeat, holds the IP: without Gone it keeps it.
		{name: "live holder", ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("b", "a")}, action: lease.None},
		{name: "gone holder: its successor takes over at once", view: bGone,
			ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("b", "a")}, action: lease.Succeed, successor: "c"},
		{name: "gone holder: its successor keeps what it bound", view: bGone,
			ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("b", "a"), Bound: true}, action: lease.Succeed},
		{name: "gone holder: the others leave it to the successor", view: bGone,
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("b", "c")}, action: lease.None, at: now().Add(successorWait)},
		{name: "gone holder, no successor: top rank at once", view: bGone,
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("b", "")}, action: lease.Acquire},
		{name: "gone holder, no successor: rank 1 a step after it was seen gone", view: bGoneEarlier,
			ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("b", "")}, action: lease.Acquire},
		{name: "gone holder, bound here though not its successor", view: bGone,
			ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("b", "c"), Bound: true}, action: lease.Unbind},
		{name: "gone holder of an orphan: top rank deletes it", view: bGone,
			ip: lease.IP{Addr: r0, Lock: succeeding("b", "")}, action: lease.Delete},
		// Dead, then gone: counted from the death, the earlier.
		{name: "dead then gone: from the death", view: xGone,
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "c")}, action: lease.None, at: now().Add(-50 * ms).Add(successorWait)},

		// This node is gone.
		{name: "gone here, bound: unbinds, no write", view: aGone,
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("a", "b"), Bound: true}, action: lease.Unbind},
		{name: "gone here, not writable: unbinds", view: aGoneNotWritable,
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("a", "b"), Bound: true}, action: lease.Unbind},
		{name: "gone here, a move pending: unbinds, no write", view: aGone,
			ip: lease.IP{Addr: r0, Named: true, Lock: &lease.Lock{Holder: "a", Successor: "b", MoveTo: "c"}, Bound: true}, action: lease.Unbind},
		{name: "gone here, unbound: binds nothing", view: aGone,
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("a", "b")}, action: lease.None},
		{name: "gone here, successor of a dead holder: takes nothing", view: aGone,
			ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a")}, action: lease.None},
		{name: "gone here, free IP: takes nothing", view: aGone,
			ip: lease.IP{Addr: r0, Named: true, FreeSince: now().Add(-time.Second)}, action: lease.None},
	} {
		t.Run(tc.name, tc.check)
	}
}

// Keeps and LostSince fold Gone into the heartbeat's verdict.
func TestViewKeepsAndLostSince(t *testing.T) {
	v := decideView()
	goneView(map[string]time.Time{"b": now().Add(-time.Second), "x": now()})(&v)
	assert.Assert(t, v.Keeps("a") && v.Keeps("c"))
	assert.Assert(t, !v.Keeps("b"), "alive by its heartbeat, but gone")
	assert.Assert(t, !v.Keeps("y"), "dead")
	since, ok := v.LostSince("b")
	assert.Assert(t, ok)
	assert.Equal(t, since, now().Add(-time.Second))
	since, ok = v.LostSince("x")
	assert.Assert(t, ok)
	assert.Equal(t, since, now().Add(-50*ms), "dead before it was gone")
	_, ok = v.LostSince("c")
	assert.Assert(t, !ok)
	_, ok = v.LostSince("ghost")
	assert.Assert(t, !ok)
}
