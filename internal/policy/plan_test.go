package policy_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/policy"
)

// ipN is the n-th test address.
func ipN(n int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}) }

// spreadOver returns count IPs starting at first, held round-robin by nodes.
func spreadOver(first, count int, nodes ...string) map[netip.Addr]string {
	h := map[netip.Addr]string{}
	for i := range count {
		h[ipN(first+i)] = nodes[i%len(nodes)]
	}
	return h
}

func merge(ms ...map[netip.Addr]string) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// apply returns the holders after the plan is carried out: planned IPs go
// to their target, other unheld IPs to their best-ranked live node.
func apply(in policy.Input, plan map[netip.Addr]string) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for ip, h := range in.Holders {
		switch {
		case plan[ip] != "":
			out[ip] = plan[ip]
		case h == "" && len(in.Live) > 0:
			out[ip] = lease.Order(ip, in.Live)[0]
		default:
			out[ip] = h
		}
	}
	return out
}

func counts(holders map[netip.Addr]string) map[string]int {
	c := map[string]int{}
	for _, h := range holders {
		if h != "" {
			c[h]++
		}
	}
	return c
}

// movedHeld counts planned handoffs of IPs held by live nodes.
func movedHeld(in policy.Input, plan map[netip.Addr]string) int {
	n := 0
	for ip, t := range plan {
		if h := in.Holders[ip]; h != t && slices.Contains(in.Live, h) {
			n++
		}
	}
	return n
}

func TestStickyKeepsHeldIPs(t *testing.T) {
	in := policy.Input{
		Policy:  config.PolicySticky,
		Live:    []string{"a", "b", "c"},
		Holders: merge(spreadOver(0, 10, "a"), spreadOver(10, 2, "b")),
	}
	assert.Equal(t, len(policy.Plan(in)), 0, "c is empty, but sticky moves nothing")
}

func TestStickyLeavesUnheldToRank(t *testing.T) {
	in := policy.Input{
		Policy:  config.PolicySticky,
		Live:    []string{"a", "b"},
		Holders: merge(spreadOver(0, 4, "a"), spreadOver(4, 100, "")),
	}
	assert.Equal(t, len(policy.Plan(in)), 0)
	// Rank alone spreads a dead node's IPs over the survivors.
	c := counts(apply(in, nil))
	assert.Assert(t, c["a"] > 30 && c["b"] > 30, "%v", c)
}

func TestUnknownPolicyIsSticky(t *testing.T) {
	in := policy.Input{Live: []string{"a", "b"}, Holders: spreadOver(0, 8, "a")}
	assert.Equal(t, len(policy.Plan(in)), 0)
}

func TestNoLiveNodes(t *testing.T) {
	for _, p := range []config.Policy{config.PolicySticky, config.PolicySpread} {
		in := policy.Input{
			Policy: p, Holders: spreadOver(0, 5, ""),
			Preferred: map[netip.Addr][]string{ipN(0): {"a"}},
		}
		assert.Equal(t, len(policy.Plan(in)), 0, p)
	}
}

func TestPreferred(t *testing.T) {
	pref := map[netip.Addr][]string{
		ipN(0): {"c"},         // held by a, c live: moves to c
		ipN(1): {"dead", "b"}, // first preferred dead: b
		ipN(2): {"dead"},      // none live: falls back
		ipN(3): {"a"},         // already there
		ipN(4): {"dead", "c"}, // unheld: c takes it first
		ipN(5): {"", "ghost"}, // nonsense: falls back
		ipN(9): {"b"},         // not managed: ignored
	}
	holders := map[netip.Addr]string{ipN(0): "a", ipN(1): "a", ipN(2): "a", ipN(3): "a", ipN(4): "", ipN(5): "a"}
	for _, p := range []config.Policy{config.PolicySticky, config.PolicySpread} {
		t.Run(string(p), func(t *testing.T) {
			in := policy.Input{Policy: p, Live: []string{"a", "b", "c"}, Holders: holders, Preferred: pref}
			plan := policy.Plan(in)
			assert.Equal(t, plan[ipN(0)], "c")
			assert.Equal(t, plan[ipN(1)], "b")
			assert.Equal(t, plan[ipN(4)], "c")
			_, ok := plan[ipN(3)]
			assert.Assert(t, !ok, "already on its preferred node")
			_, ok = plan[ipN(9)]
			assert.Assert(t, !ok, "an IP that is not managed")
			if p == config.PolicySticky {
				assert.Equal(t, len(plan), 3, "%v", plan)
			}
		})
	}
}

// A preferred node that comes back takes its IP back, under sticky too.
func TestPreferredNodeReturns(t *testing.T) {
	pref := map[netip.Addr][]string{ipN(0): {"a", "b"}}
	in := policy.Input{Policy: config.PolicySticky, Live: []string{"b", "c"}, Holders: map[netip.Addr]string{ipN(0): ""}, Preferred: pref}
	assert.DeepEqual(t, policy.Plan(in), map[netip.Addr]string{ipN(0): "b"}, addrs())

	in = policy.Input{Policy: config.PolicySticky, Live: []string{"c"}, Holders: map[netip.Addr]string{ipN(0): ""}, Preferred: pref}
	assert.Equal(t, len(policy.Plan(in)), 0, "no preferred node live: rank decides")

	in = policy.Input{Policy: config.PolicySticky, Live: []string{"a", "b", "c"}, Holders: map[netip.Addr]string{ipN(0): "c"}, Preferred: pref}
	assert.DeepEqual(t, policy.Plan(in), map[netip.Addr]string{ipN(0): "a"}, addrs())
}

// One default preferred node for every IP keeps them all on it while it
// lives (first-alive), whatever the policy.
func TestFirstAlive(t *testing.T) {
	holders := spreadOver(0, 30, "a", "b", "c")
	pref := map[netip.Addr][]string{}
	for ip := range holders {
		pref[ip] = []string{"b"}
	}
	for _, p := range []config.Policy{config.PolicySticky, config.PolicySpread} {
		in := policy.Input{Policy: p, Live: []string{"a", "b", "c"}, Holders: holders, Preferred: pref}
		plan := policy.Plan(in)
		assert.Equal(t, len(plan), 20, p)
		assert.DeepEqual(t, counts(apply(in, plan)), map[string]int{"b": 30})
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		name    string
		live    []string
		holders map[netip.Addr]string
		pref    map[netip.Addr][]string
		moved   int            // handoffs of held IPs
		want    map[string]int // IPs per node after the plan; every node not listed holds ⌊n/k⌋ or ⌈n/k⌉
	}{
		{name: "all on one node", live: []string{"a", "b", "c"}, holders: spreadOver(0, 12, "a"), moved: 8, want: map[string]int{"a": 4, "b": 4, "c": 4}},
		{name: "balanced stays", live: []string{"a", "b", "c"}, holders: spreadOver(0, 12, "a", "b", "c"), want: map[string]int{"a": 4, "b": 4, "c": 4}},
		{name: "5/4/4 is balanced", live: []string{"a", "b", "c"}, holders: spreadOver(0, 13, "a", "b", "c"), want: map[string]int{"a": 5, "b": 4, "c": 4}},
		{name: "c died", live: []string{"a", "b"}, holders: merge(spreadOver(0, 8, "a", "b"), spreadOver(8, 4, "")), want: map[string]int{"a": 6, "b": 6}},
		{name: "c returns", live: []string{"a", "b", "c"}, holders: spreadOver(0, 12, "a", "b"), moved: 4, want: map[string]int{"a": 4, "b": 4, "c": 4}},
		{name: "d joins", live: []string{"a", "b", "c", "d"}, holders: spreadOver(0, 12, "a", "b", "c"), moved: 3, want: map[string]int{"a": 3, "b": 3, "c": 3, "d": 3}},
		{name: "7/5/0 and one unheld: the 5th slot goes to a holder", live: []string{"a", "b", "c"}, holders: merge(spreadOver(0, 7, "a"), spreadOver(7, 5, "b"), spreadOver(12, 1, "")), moved: 3, want: map[string]int{"a": 5, "b": 4, "c": 4}},
		{name: "fewer IPs than nodes", live: []string{"a", "b", "c", "d", "e"}, holders: spreadOver(0, 2, "a"), moved: 1, want: map[string]int{"a": 1}},
		{name: "dead holder given", live: []string{"a", "b"}, holders: spreadOver(0, 4, "gone"), want: map[string]int{"a": 2, "b": 2}},
		{
			name: "pinned IPs count as load", live: []string{"a", "b", "c"},
			holders: spreadOver(0, 12, "a", "b", "c"),
			pref:    map[netip.Addr][]string{ipN(0): {"a"}, ipN(3): {"a"}, ipN(6): {"a"}, ipN(9): {"a"}, ipN(1): {"a"}, ipN(2): {"a"}},
			moved:   2, want: map[string]int{"a": 6, "b": 3, "c": 3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := policy.Input{Policy: config.PolicySpread, Live: tc.live, Holders: tc.holders, Preferred: tc.pref}
			plan := policy.Plan(in)
			assert.Equal(t, movedHeld(in, plan), tc.moved, "%v", plan)
			got := counts(apply(in, plan))
			n, k := len(tc.holders), len(tc.live)
			for _, node := range tc.live {
				if want, ok := tc.want[node]; ok {
					assert.Equal(t, got[node], want, "node %s: %v", node, got)
				} else {
					assert.Assert(t, got[node] == n/k || got[node] == (n+k-1)/k, "node %s: %v", node, got)
				}
			}
			for ip, target := range plan {
				assert.Assert(t, target != in.Holders[ip], "%s planned onto its holder", ip)
			}
		})
	}
}

// A node joining takes the IPs on which it outranks their holders, so the
// same IPs move whichever node computes the plan, and a leave and return
// brings back the same layout.
func TestSpreadJoinIsRendezvous(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	in := policy.Input{Policy: config.PolicySpread, Live: nodes, Holders: spreadOver(0, 300, "")}
	start := apply(in, policy.Plan(in))

	left := map[netip.Addr]string{}
	for ip, h := range start {
		if h == "c" {
			h = ""
		}
		left[ip] = h
	}
	in = policy.Input{Policy: config.PolicySpread, Live: []string{"a", "b"}, Holders: left}
	afterLeave := apply(in, policy.Plan(in))

	in = policy.Input{Policy: config.PolicySpread, Live: nodes, Holders: afterLeave}
	plan := policy.Plan(in)
	assert.Equal(t, movedHeld(in, plan), 100)
	for ip, target := range plan {
		assert.Equal(t, target, "c")
		assert.Equal(t, lease.Rank(ip, "c", []string{"c", afterLeave[ip]}), 0, "%s: c does not outrank %s", ip, afterLeave[ip])
	}
}

func Example() {
	in := policy.Input{
		Policy:  config.PolicySpread,
		Live:    []string{"node-a", "node-b", "node-c"},
		Holders: map[netip.Addr]string{ipN(1): "node-a", ipN(2): "node-a", ipN(3): "node-a"},
	}
	plan := policy.Plan(in)
	fmt.Println(len(plan), "handoffs")
	// Output: 2 handoffs
}

// Unheld IPs go to the node rendezvous rank prefers while it has room, so
// the planned node is usually the one that would win the race anyway.
func TestSpreadUnheldFollowRank(t *testing.T) {
	live := []string{"a", "b", "c"}
	in := policy.Input{Policy: config.PolicySpread, Live: live, Holders: spreadOver(0, 300, "")}
	plan := policy.Plan(in)
	assert.Equal(t, plan[ipN(0)], lease.Order(ipN(0), live)[0])
	first := 0
	for ip, target := range plan {
		if target == lease.Order(ip, live)[0] {
			first++
		}
	}
	assert.Assert(t, first > 240, "only %d of 300 IPs planned onto their best-ranked node", first)
}

// An IP restricted to some nodes (externalTrafficPolicy: Local) is planned
// only onto them, under either policy; spread counts it as load where it
// lives and balances the others around it.
func TestPlanOnlyWhereAllowed(t *testing.T) {
	only := func(nodes ...string) lease.Only { return lease.Only{Restricted: true, Nodes: nodes} }
	a, b, c := ipN(1), ipN(2), ipN(3)
	for _, pol := range []config.Policy{config.PolicySticky, config.PolicySpread} {
		t.Run(string(pol), func(t *testing.T) {
			in := policy.Input{
				Policy: pol, Live: []string{"n1", "n2", "n3"},
				Holders:   map[netip.Addr]string{a: "", b: "n1", c: "n1"},
				Preferred: map[netip.Addr][]string{a: {"n1", "n2"}, b: {"n3"}},
				Only:      map[netip.Addr]lease.Only{a: only("n2"), b: only("n1"), c: only()},
			}
			plan := policy.Plan(in)
			assert.Equal(t, plan[a], "n2", "the first preferred node it allows")
			_, moved := plan[b]
			assert.Assert(t, !moved, "its preferred node is not allowed: it stays")
			_, moved = plan[c]
			assert.Assert(t, !moved, "no node is allowed: nothing is planned")
		})
	}
	// Spread: three restricted IPs pinned on n1 count as its load, so the
	// three free ones go to n2 and n3.
	in := policy.Input{Policy: config.PolicySpread, Live: []string{"n1", "n2"},
		Holders: spreadOver(10, 4, "n1"), Only: map[netip.Addr]lease.Only{}}
	for ip := range spreadOver(10, 2, "n1") {
		in.Only[ip] = only("n1")
	}
	for ip, h := range apply(in, policy.Plan(in)) {
		if _, restricted := in.Only[ip]; restricted {
			assert.Equal(t, h, "n1", "%s", ip)
		} else {
			assert.Equal(t, h, "n2", "%s: n1 carries the restricted ones", ip)
		}
	}
}
