package lease_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

// succeeding is a lock held by holder, naming successor, with no move.
func succeeding(holder, successor string) *lease.Lock {
	return &lease.Lock{Holder: holder, Successor: successor, ResourceVersion: "5"}
}

// The successor a lock names holds the IP as soon as its holder is judged
// dead: it binds and writes without waiting for its rank, and the others
// leave the IP to it while it is a live node the IP may go to. Otherwise
// the race decides, as without a successor.
func TestDecideSuccession(t *testing.T) {
	r0, r1 := ipRanked(t, 0), ipRanked(t, 1)
	only := func(nodes ...string) lease.Only { return lease.Only{Restricted: true, Nodes: nodes} }
	notWritable := func(v *lease.View) { v.Writable = false }
	notEligible := func(v *lease.View) { v.Eligible = false; v.Live = []string{"b", "c"} }
	early := func(v *lease.View) { v.PeersKnown = now().Add(time.Second) }
	presumed := func(v *lease.View) {
		v.Alive = func(string) bool { return true }
		v.Renewing = func(n string) bool { return n == "a" || n == "b" || n == "c" }
	}
	next := lease.Order(r1, []string{"b", "c"})[0]
	for _, tc := range []decideCase{
		// This node is the successor.
		{name: "successor, rank 1, at once", ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a")}, action: lease.Succeed, successor: next},
		{name: "successor, bound, writes", ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a"), Bound: true}, action: lease.Succeed},
		{name: "successor of a holder never seen", ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("ghost", "a")}, action: lease.Succeed},
		{name: "successor, not writable, unbound: waits", view: notWritable, ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a")}, action: lease.None},
		{name: "successor, not writable, bound: keeps it", view: notWritable, ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a"), Bound: true}, action: lease.None},
		{name: "successor, not eligible", view: notEligible, ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a")}, action: lease.None},
		{name: "successor, not eligible, bound", view: notEligible, ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a"), Bound: true}, action: lease.Unbind},
		{name: "successor, no endpoint here", ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a"), Only: only("b")}, action: lease.None},
		{name: "successor, before the peers are known", view: early, ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a")}, action: lease.None, at: now().Add(time.Second)},
		{name: "successor, holder alive", ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("b", "a")}, action: lease.None},
		{name: "successor, holder alive, bound here", ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("b", "a"), Bound: true}, action: lease.Unbind},
		// After a break every node is presumed alive for a while: a
		// successor keeps what it bound until the holder is seen renewing.
		{name: "successor, bound, holder presumed alive", view: presumed, ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a"), Bound: true}, action: lease.Succeed},
		{name: "successor, unbound, holder presumed alive", view: presumed, ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("x", "a")}, action: lease.None},
		{name: "successor, a move pending elsewhere: the race", ip: lease.IP{Addr: r1, Named: true, Lock: &lease.Lock{Holder: "x", Successor: "a", MoveTo: "c"}}, action: lease.None, at: now().Add(-50 * ms).Add(step)},
		{name: "successor of an unheld lock: the race", ip: lease.IP{Addr: r1, Named: true, Lock: succeeding("", "a"), FreeSince: now()}, action: lease.None, at: now().Add(step)},

		// Another node is the successor.
		{name: "b succeeds: top rank waits", ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "b")}, action: lease.None, at: now().Add(-50 * ms).Add(successorWait)},
		// A successor that has not taken the IP over SuccessorWait after
		// its holder died is raced, and still ranked first: a's rank 0
		// among a, b, c becomes 1 behind b.
		{name: "b overdue: top rank races a step behind it", view: func(v *lease.View) { v.SuccessorWait = 50 * ms },
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "b")}, action: lease.None, at: now().Add(step)},
		{name: "b overdue by a step: top rank acquires", view: func(v *lease.View) { v.SuccessorWait = 50*ms - step },
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "b")}, action: lease.Acquire},
		{name: "b overdue, bound here", view: func(v *lease.View) { v.SuccessorWait = 0 },
			ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "b"), Bound: true}, action: lease.Unbind},
		{name: "b succeeds, bound here", ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "b"), Bound: true}, action: lease.Unbind},
		{name: "dead y succeeds: the race", ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "y")}, action: lease.Acquire},
		{name: "unknown successor: the race", ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "ghost")}, action: lease.Acquire},
		{name: "b succeeds but has no endpoint: the race", ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "b"), Only: only("a", "c")}, action: lease.Acquire},
		{name: "b succeeds, not eligible here", view: notEligible, ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "b")}, action: lease.None, at: now().Add(-50 * ms).Add(successorWait)},
		{name: "the holder named itself: the race", ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "x")}, action: lease.Acquire},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
}

// Every write that names a holder names its successor: the best-ranked
// live node the IP may go to, other than the new holder.
func TestDecideNamesTheSuccessor(t *testing.T) {
	r0 := ipRanked(t, 0)
	bc := lease.Order(r0, []string{"b", "c"})[0]
	for _, tc := range []decideCase{
		{name: "create", ip: lease.IP{Addr: r0, Named: true, FreeSince: now()}, action: lease.Create, successor: bc},
		{name: "acquire", ip: lease.IP{Addr: r0, Named: true, Lock: lock("x", "")}, action: lease.Acquire, successor: bc},
		{name: "hand-off to c", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "c"), Bound: true}, action: lease.Handoff, target: "c",
			successor: lease.Order(r0, []string{"a", "b"})[0]},
		{name: "create, restricted to a and c", ip: lease.IP{Addr: r0, Named: true, FreeSince: now(), Only: lease.Only{Restricted: true, Nodes: []string{"a", "c"}}},
			action: lease.Create, successor: "c"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
	// The policy's choice, when live, over the rank: a spread cluster's
	// dead node's IPs go where spread wants them, with no second move.
	worse := "b"
	if bc == "b" {
		worse = "c"
	}
	for _, tc := range []decideCase{
		{name: "acquire, the policy's next", ip: lease.IP{Addr: r0, Named: true, Lock: lock("x", ""), Next: worse}, action: lease.Acquire, successor: worse},
		{name: "acquire, the policy's next is dead", ip: lease.IP{Addr: r0, Named: true, Lock: lock("x", ""), Next: "y"}, action: lease.Acquire, successor: bc},
		{name: "succeed, the policy's next", ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("x", "a"), Next: worse}, action: lease.Succeed, successor: worse},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
	v := decideView()
	v.Live = []string{"a"}
	d := lease.Decide(v, lease.IP{Addr: r0, Named: true, FreeSince: now()})
	assert.Equal(t, d.Action, lease.Create)
	assert.Equal(t, d.Successor, "", "no other live node: none")
}

// A holder rewrites its lock's successor only when that one is gone: not
// live for the grace, or never seen live since this node started; a
// better-ranked node joining changes nothing.
func TestDecideRewritesAGoneSuccessor(t *testing.T) {
	r0 := ipRanked(t, 0)
	bc := lease.Order(r0, []string{"b", "c"})[0]
	grace := 20 * time.Second
	lastLive := map[string]time.Time{"a": now(), "b": now(), "c": now(), "x": now().Add(-5 * time.Second), "y": now().Add(-time.Minute)}
	withGrace := func(v *lease.View) {
		v.SuccessorGrace = grace
		v.LiveUntil = func(n string) (time.Time, bool) {
			t, ok := lastLive[n]
			return t, ok
		}
	}
	both := func(f ...func(*lease.View)) func(*lease.View) {
		return func(v *lease.View) {
			for _, g := range f {
				g(v)
			}
		}
	}
	held := func(successor string) lease.IP {
		return lease.IP{Addr: r0, Named: true, Lock: succeeding("a", successor), Bound: true}
	}
	worse := "b"
	if bc == "b" {
		worse = "c"
	}
	for _, tc := range []decideCase{
		{name: "live successor, a better one exists: kept", view: withGrace, ip: held(worse), action: lease.None},
		{name: "successor gone for less than the grace: kept, decided again", view: withGrace, ip: held("x"), action: lease.None, at: lastLive["x"].Add(grace)},
		{name: "successor gone for the grace", view: withGrace, ip: held("y"), action: lease.NameSuccessor, successor: bc},
		{name: "successor never seen live", view: withGrace, ip: held("ghost"), action: lease.NameSuccessor, successor: bc},
		{name: "successor live but no longer allowed: at once", view: withGrace,
			ip:     lease.IP{Addr: r0, Named: true, Lock: succeeding("a", "b"), Bound: true, Only: lease.Only{Restricted: true, Nodes: []string{"a", "c"}}},
			action: lease.NameSuccessor, successor: "c"},
		{name: "no successor", view: withGrace, ip: held(""), action: lease.NameSuccessor, successor: bc},
		{name: "itself as successor", view: withGrace, ip: held("a"), action: lease.NameSuccessor, successor: bc},
		{name: "no successor, not writable", view: both(withGrace, func(v *lease.View) { v.Writable = false }), ip: held(""), action: lease.None},
		{name: "no successor, no live peer", view: both(withGrace, func(v *lease.View) { v.Live = []string{"a"} }), ip: held(""), action: lease.None},
		{name: "no successor, unbound: bound, and one named", view: withGrace, ip: lease.IP{Addr: r0, Named: true, Lock: succeeding("a", "")}, action: lease.Bind, successor: bc},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
}
